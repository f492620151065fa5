"""The judge step: the judge role (harness/roles/judge.py: Ragas faithfulness through our LLM
client and cache) asked about every final answer of a run folder, its verdicts written beside
the traces as the run's judgments; the run's metrics are scored again afterwards elsewhere.

A judge failure (broken JSON after instructor's re-asks, an HTTP error after the retries, a
cache miss in replay mode) gives value null and an `error: ...` status: unmeasured, never 0,
and never the end of the step. Without a judge endpoint every answer is `not measured: no judge
endpoint` with value null. Answer relevancy is not computed: Ragas' AnswerRelevancy needs an
embedding model (cosine similarity of generated questions), see docs/llm.md."""
from __future__ import annotations

from harness.errors import BadInput
from harness import env as _env  # noqa: F401  (RAGAS_DO_NOT_TRACK and offline settings first)

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from harness.llm.client import EndpointConfig
from harness.roles.base import NOT_MEASURED
from harness.roles.judge import METRIC, OK, ROLE, RagasJudge, first_lines
from harness.run.folder import RunFolder
from harness.run.traces import read_traces

TOP_RANKED = 3  # contexts when the answer cites no documents: the top of the ranking

SKIPPED = "skipped: abstained/no answer"
NO_CONTEXT = "skipped: no retrieved context"

SCHEMA = pa.schema([
    ("arm_id", pa.string()),
    ("repeat", pa.int32()),
    ("session_id", pa.string()),
    ("turn_index", pa.int32()),
    ("metric", pa.string()),
    ("value", pa.float64()),  # null unless status == "ok"
    ("status", pa.string()),
    ("judge_model", pa.string()),  # null when no judge endpoint
    ("n_statements", pa.int32()),  # statements the judge gave verdicts on
    ("n_supported", pa.int32()),  # of those, inferable from the contexts
    ("question", pa.string()),  # the turn's user text (what Ragas saw as user_input)
    ("issued_query", pa.string()),  # the first query the arm issued (rewrite arms: the rewrite)
    ("context_doc_ids", pa.list_(pa.string())),  # the documents given to the judge as contexts
])

TRACE_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "original_query",
                 "issued_queries", "answer", "answer_doc_ids", "abstained", "ranking"]


@dataclass
class JudgeSummary:
    path: Path
    judge_model: str | None
    counts: dict[str, int] = field(default_factory=dict)  # ok / error / not measured / skipped
    mean: float | None = None  # mean faithfulness over the ok rows
    http_calls: int = 0
    cache_hits: int = 0

    def line(self) -> str:
        c = self.counts
        answers = c.get("ok", 0) + c.get("error", 0) + c.get("not measured", 0)
        if self.judge_model is None:
            head = f"faithfulness not measured (no judge endpoint) on {answers} answer(s)"
        else:
            mean = f"{self.mean:.3f}" if self.mean is not None else "n/a"
            head = (f"faithfulness measured on {c.get('ok', 0)}/{answers} answer(s), mean {mean}, "
                    f"{c.get('error', 0)} unmeasured (judge error); judge {self.judge_model}, "
                    f"{self.http_calls} HTTP call(s), {self.cache_hits} cache hit(s)")
        return f"{head}; {c.get('skipped', 0)} skipped; {self.path}"

    @property
    def mostly_failed(self) -> bool:
        """More than half of the judgments asked failed: the judge endpoint is down or broken."""
        asked = self.counts.get("ok", 0) + self.counts.get("error", 0)
        return bool(asked) and self.counts.get("error", 0) > asked / 2


# ---- inputs -------------------------------------------------------------------------------

def _judge_endpoint(config: dict) -> EndpointConfig | None:
    from harness.roles.base import LLMConfig

    llm = LLMConfig.model_validate(config.get("llm") or {})
    return llm.roles.get(ROLE)


def _doc_texts(folder: RunFolder, manifest: dict) -> dict[str, str]:
    from harness.evalset.load import load_eval_set

    es = load_eval_set(folder.require_eval_set(manifest, " (the retrieved documents are there)"))
    return {d: doc.passage for d, doc in es.docs.items()}


def _user_texts(folder: RunFolder) -> dict[tuple[str, int], str]:
    if not folder.has_labels():
        return {}
    labels = folder.labels_table()
    if "user" not in labels.column_names:
        return {}
    return {(s, int(t)): u for s, t, u in zip(labels["session_id"].to_pylist(), labels["turn_index"].to_pylist(),
                                              labels["user"].to_pylist()) if u}


def _final_rows(run_dir: Path) -> list[dict]:
    rows = read_traces(run_dir, TRACE_COLUMNS).to_pylist()
    final = [r for r in rows if r["is_final"]]
    final.sort(key=lambda r: (r["arm_id"], r["repeat"], r["session_id"], r["turn_index"]))
    return final


def _answered(r: dict) -> bool:
    return bool((r.get("answer") or "").strip()) and not r.get("abstained")


def _contexts(r: dict, docs: dict[str, str]) -> list[str]:
    ids = [d for d in (r.get("answer_doc_ids") or []) if d in docs]
    if not ids:
        ids = [d for d in (r.get("ranking") or []) if d in docs][:TOP_RANKED]
    return ids


def _records(rows: list[dict], users: dict, docs: dict, ep) -> tuple[list[dict], dict[tuple, list[int]]]:
    """One judgment record per final row, and the calls to make: (question, answer, contexts) ->
    the records that one call judges."""
    out: list[dict] = []
    pending: dict[tuple, list[int]] = {}
    for r in rows:
        question = users.get((r["session_id"], int(r["turn_index"]))) or r.get("original_query") or ""
        rec = {"arm_id": r["arm_id"], "repeat": r["repeat"], "session_id": r["session_id"],
               "turn_index": r["turn_index"], "metric": METRIC, "value": None, "status": None,
               "judge_model": ep.model if ep is not None else None, "n_statements": None, "n_supported": None,
               "question": question, "issued_query": (r.get("issued_queries") or [None])[0], "context_doc_ids": None}
        if not _answered(r):
            rec.update(status=SKIPPED, judge_model=None)
        elif ep is None:
            rec["status"] = NOT_MEASURED
        else:
            ids = _contexts(r, docs)
            rec["context_doc_ids"] = ids
            if not ids:
                rec.update(status=NO_CONTEXT, judge_model=None)
            elif not question.strip():
                rec["status"] = "error: no question text for this turn"
            else:
                pending.setdefault((question, r["answer"], tuple(ids)), []).append(len(out))
        out.append(rec)
    return out, pending


async def ajudge_run(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
                     concurrency: int | None = None, cache_folder: str | Path | None = None,
                     cache_mode: str | None = None) -> JudgeSummary:
    """Judge every final answer of `run_dir` and write its judgments (see judge_run)."""
    folder = RunFolder(run_dir)
    manifest = folder.read_manifest()
    config = manifest.config
    ep = endpoint if endpoint is not None else _judge_endpoint(config)
    rows = _final_rows(folder.path)
    docs = _doc_texts(folder, manifest) if ep is not None and any(_answered(r) for r in rows) else {}
    out, pending = _records(rows, _user_texts(folder), docs, ep)
    summary = JudgeSummary(folder.path, ep.model if ep is not None else None)
    if pending:
        from harness.roles.base import step_cache

        cache = step_cache(config, cache_folder, "refresh" if refresh else cache_mode)
        keys = list(pending)
        async with RagasJudge(ep, cache, concurrency or int(config.get("concurrency") or 16)) as judge:
            verdicts = await judge.faithfulness([(k[0], k[1], [docs[d] for d in k[2]]) for k in keys])
        summary.http_calls, summary.cache_hits = judge.http_calls, judge.cache_hits
        for k, v in zip(keys, verdicts):
            for i in pending[k]:
                out[i].update(value=v.value, status=v.status, n_statements=v.n_statements, n_supported=v.n_supported)
    summary.path = folder.write_judgments(pa.Table.from_pylist(out, schema=SCHEMA))
    for rec in out:
        cls = rec["status"].split(":")[0]
        summary.counts[cls] = summary.counts.get(cls, 0) + 1
    ok = [rec["value"] for rec in out if rec["status"] == OK]
    summary.mean = sum(ok) / len(ok) if ok else None
    return summary


def judge_run(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
              concurrency: int | None = None, cache_folder: str | Path | None = None) -> Path:
    """Ask the judge role (the run config's `llm.roles.judge`, or `endpoint`) for the Ragas
    faithfulness of every final, non-abstained answer of the run folder; contexts are the texts
    of the answer's cited documents (`answer_doc_ids`), else the top 3 of the ranking. Writes the
    run's judgments atomically and returns their path. `refresh=True` opens the LLM cache in
    refresh mode for the judge client only (the run's other roles are not re-asked: the step
    reads traces, it never replays). Concurrency: `concurrency`, else the run config's."""
    return asyncio.run(ajudge_run(run_dir, refresh, endpoint, concurrency, cache_folder)).path


def judge_endpoint(url: str | None, model: str | None, kind: str = "openai-compatible",
                   config: Path | None = None) -> EndpointConfig | None:
    """The judge endpoint given on the command line (`--endpoint URL --model M`, or `--config
    FILE` with the fields of llm.roles.judge), overriding the run's; None: the run's own."""
    from pydantic import ValidationError

    from harness.yamlpos import located, read_yaml, validation_problems

    if config is not None:
        raw, text = read_yaml(config, BadInput)  # unreadable, not YAML, a key written twice: exit 2
        where = ("llm", "roles", "judge") if isinstance(raw, dict) and "llm" in raw else ()
        ep = raw or {}
        for k in where:
            ep = ep.get(k) if isinstance(ep, dict) else None
        if not isinstance(ep, dict):
            raise BadInput(f"--config {config}: " + ("no llm.roles.judge in this run config" if where else
                                                       "expected the fields of llm.roles.judge (kind, model, ...)"))
        try:
            return EndpointConfig.model_validate(ep)
        except ValidationError as e:
            problems = [(where + loc, msg) for loc, msg in validation_problems(e, EndpointConfig)]
            raise BadInput(f"--config {config}: not a judge endpoint (the fields of llm.roles.judge, or a run "
                             "config with them):\n" + located(config, text, problems)) from None
    if url is None and model is None:
        return None
    if not url or not model:
        raise BadInput("--endpoint and --model go together")
    return EndpointConfig(kind=kind, base_url=url, model=model)


def judge_command(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
                  cache_mode: str | None = None) -> JudgeSummary:
    """`harness judge RUN_DIR [--refresh]`: judge every answer of the run (the rows are written, a
    few judge errors included) and return the summary; BadInput when the folder is not a run or the
    judge configuration is unusable. Whether too many failed (exit 3) is the command's to say."""
    from harness.evalset.load import EvalSetError

    folder = RunFolder(run_dir).require()
    try:
        return asyncio.run(ajudge_run(folder.path, refresh, endpoint, cache_mode=cache_mode))
    except (ValueError, FileNotFoundError, RuntimeError, EvalSetError) as e:  # ragas and its SDKs say it their way
        raise BadInput(f"{run_dir}: {first_lines(e, 3)}") from None