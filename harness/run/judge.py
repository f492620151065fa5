"""The judge step: Ragas faithfulness of every final answer of a run folder, written to
`judgments.parquet` beside the traces.

Ragas 0.4's collections API (`ragas.metrics.collections.Faithfulness`) with an LLM from
`ragas.llms.llm_factory(model, client=...)`, where the client is the `AsyncOpenAI` of our own
`LLMClient`: every request Ragas (through instructor, JSON mode) builds goes through our httpx
transport and so through the LLM cache. Faithfulness is two calls per answer: statement
extraction (the answer broken into atomic statements) and verdicts (NLI: is each statement
inferable from the retrieved contexts); the score is supported statements over all statements.

A judge failure (broken JSON after instructor's re-asks, an HTTP error after the retries, a
cache miss in replay mode) gives value null and an `error: ...` status: unmeasured, never 0,
and never the end of the step. Without a judge endpoint every answer is `not measured: no judge
endpoint` with value null. Answer relevancy is not computed: Ragas' AnswerRelevancy needs an
embedding model (cosine similarity of generated questions), see docs/llm.md."""
from __future__ import annotations

from harness import env as _env  # noqa: F401  (RAGAS_DO_NOT_TRACK and offline settings first)

import asyncio
import contextlib
import logging
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.llm.cache import LLMCache
from harness.llm.client import EndpointConfig, LLMClient
from harness.llm.transport import ROLE_HEADER
from harness.run.manifest import read_manifest
from harness.run.traces import read_traces

JUDGMENTS = "judgments.parquet"
METRIC = "faithfulness"
ROLE = "judge"
TOP_RANKED = 3  # contexts when the answer cites no documents: the top of the ranking

OK = "ok"
NOT_MEASURED = "not measured: no judge endpoint"
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


# ---- inputs -------------------------------------------------------------------------------

def _judge_endpoint(config: dict) -> EndpointConfig | None:
    from harness.roles.base import LLMConfig

    llm = LLMConfig.model_validate(config.get("llm") or {})
    return llm.roles.get(ROLE)


def _eval_set_path(manifest: dict) -> Path | None:
    p = (manifest.get("eval_set") or {}).get("path") or (manifest.get("config") or {}).get("eval_set")
    if not p:
        return None
    path = Path(p)
    if not path.is_absolute() and not path.exists():
        home = Path(os.environ.get("HARNESS_HOME", Path.cwd()))
        if (home / path).exists():
            path = home / path
    return path


def _doc_texts(manifest: dict) -> dict[str, str]:
    from harness.evalset.load import load_eval_set

    path = _eval_set_path(manifest)
    if path is None:
        raise ValueError("manifest names no eval set: cannot read the retrieved documents")
    es = load_eval_set(path)
    return {d: (f"{doc.title}\n{doc.text}" if doc.title else doc.text) for d, doc in es.docs.items()}


def _user_texts(run_dir: Path) -> dict[tuple[str, int], str]:
    path = run_dir / "labels.parquet"
    if not path.exists():
        return {}
    labels = pq.read_table(path)
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


# ---- the judge ----------------------------------------------------------------------------

@dataclass
class Verdict:
    value: float | None
    status: str
    n_statements: int | None = None
    n_supported: int | None = None


def _faithfulness_class():
    from ragas.metrics.collections import Faithfulness

    class CountingFaithfulness(Faithfulness):
        """Faithfulness that also keeps the statement counts and the step it is in."""

        stage = "start"
        n_statements: int | None = None
        n_supported: int | None = None

        async def _create_statements(self, question, response):
            self.stage = "statement extraction"
            return await super()._create_statements(question, response)

        async def _create_verdicts(self, statements, context):
            self.stage = "verdicts"
            return await super()._create_verdicts(statements, context)

        def _compute_score(self, verdicts):
            self.n_statements = len(verdicts.statements)
            self.n_supported = sum(1 for s in verdicts.statements if s.verdict)
            return super()._compute_score(verdicts)

    return CountingFaithfulness


def _first_lines(e: BaseException, n: int = 2) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip() and not x.strip().startswith("For further information")]
    return "; ".join(lines[:n])[:240]


def _one(e: BaseException) -> str:
    from pydantic import ValidationError

    if isinstance(e, ValidationError):  # the judge's reply did not parse or fit the schema
        errs = e.errors()
        where = ".".join(str(x) for x in errs[0]["loc"]) if errs and errs[0]["loc"] else ""
        msg = errs[0]["msg"] if errs else str(e)
        return f"invalid reply for {e.title}: {where + ': ' if where else ''}{msg}"[:240]
    status = getattr(e, "status_code", None)
    return f"{type(e).__name__}{f' {status}' if status else ''}: {_first_lines(e)}"


def describe_error(e: BaseException) -> str:
    """A short, secret-free description: instructor's retry wrapper is unwrapped to the last
    attempt's error (the invalid JSON, the HTTP status)."""
    failed = getattr(e, "failed_attempts", None)
    if failed:
        n = getattr(e, "n_attempts", None) or len(failed)
        return f"{_one(failed[-1].exception)} (after {n} attempt{'s' if n != 1 else ''})"
    return _one(e)


@contextlib.contextmanager
def _quiet_instructor():
    """instructor logs every failed attempt at ERROR with the whole reply; the step records the
    failure on the row instead."""
    log = logging.getLogger("instructor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _llm_kwargs(ep: EndpointConfig) -> dict[str, Any]:
    kw: dict[str, Any] = {"temperature": ep.temperature}
    # Ragas' statement lists with reasons need room: its own default (1024) unless set on the endpoint
    kw["max_tokens"] = ep.max_tokens if "max_tokens" in ep.model_fields_set else max(ep.max_tokens, 1024)
    if ep.extra_body:
        kw["extra_body"] = ep.extra_body
    return kw


async def _judge_one(metric_cls, llm, sem: asyncio.Semaphore, question: str, answer: str,
                     contexts: list[str]) -> Verdict:
    metric = metric_cls(llm=llm)
    try:
        async with sem:
            res = await metric.ascore(user_input=question, response=answer, retrieved_contexts=contexts)
    except Exception as e:  # recorded on the row; the step goes on
        return Verdict(None, f"error: {metric.stage}: {describe_error(e)}", metric.n_statements, metric.n_supported)
    value = res.value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        n = metric.n_statements if metric.n_statements is not None else 0
        return Verdict(None, "error: the judge found no statements in the answer", n, metric.n_supported)
    return Verdict(float(value), OK, metric.n_statements, metric.n_supported)


async def ajudge_run(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
                     concurrency: int | None = None, cache_folder: str | Path | None = None) -> JudgeSummary:
    """Judge every final answer of `run_dir` and write judgments.parquet (see judge_run)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    config = manifest.get("config") or {}
    ep = endpoint if endpoint is not None else _judge_endpoint(config)
    rows = _final_rows(run_dir)
    users = _user_texts(run_dir)

    out: list[dict] = []
    pending: dict[tuple, list[int]] = {}  # (question, answer, contexts) -> rows judged by that one call
    docs = _doc_texts(manifest) if ep is not None and any(_answered(r) for r in rows) else {}
    for r in rows:
        question = users.get((r["session_id"], int(r["turn_index"]))) or r.get("original_query") or ""
        issued = (r.get("issued_queries") or [None])[0]
        rec = {"arm_id": r["arm_id"], "repeat": r["repeat"], "session_id": r["session_id"],
               "turn_index": r["turn_index"], "metric": METRIC, "value": None, "status": None,
               "judge_model": ep.model if ep is not None else None, "n_statements": None, "n_supported": None,
               "question": question, "issued_query": issued, "context_doc_ids": None}
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

    summary = JudgeSummary(run_dir / JUDGMENTS, ep.model if ep is not None else None)
    if pending:
        from ragas.llms import llm_factory

        llm_cfg = config.get("llm") or {}
        cache_cfg = llm_cfg.get("cache") or {}
        folder = cache_folder or cache_cfg.get("folder") or ".cache/llm"
        mode = "refresh" if refresh else cache_cfg.get("mode", "readwrite")
        n = concurrency or int(config.get("concurrency") or 16)
        client = LLMClient(ep, LLMCache(folder, mode), connections=n)
        try:
            # retries (429/5xx/timeouts, honouring Retry-After) by the SDK over our transport
            sdk = client.sdk.with_options(max_retries=ep.max_retries, default_headers={ROLE_HEADER: ROLE})
            llm = llm_factory(ep.model, client=sdk, **_llm_kwargs(ep))
            metric_cls = _faithfulness_class()
            sem = asyncio.Semaphore(n)
            keys = list(pending)
            docs_of = {k: [docs[d] for d in k[2]] for k in keys}
            verdicts = await asyncio.gather(*(_judge_one(metric_cls, llm, sem, k[0], k[1], docs_of[k]) for k in keys))
        finally:
            summary.http_calls, summary.cache_hits = client.stats.http_calls, client.stats.cache_hits
            await client.aclose()
        for k, v in zip(keys, verdicts):
            for i in pending[k]:
                out[i].update(value=v.value, status=v.status, n_statements=v.n_statements, n_supported=v.n_supported)

    _write(run_dir, out)
    for rec in out:
        cls = rec["status"].split(":")[0]
        summary.counts[cls] = summary.counts.get(cls, 0) + 1
    ok = [rec["value"] for rec in out if rec["status"] == OK]
    summary.mean = sum(ok) / len(ok) if ok else None
    return summary


def _write(run_dir: Path, rows: list[dict]) -> Path:
    path = run_dir / JUDGMENTS
    tmp = path.with_name(JUDGMENTS + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp)
    tmp.replace(path)
    return path


def judge_run(run_dir: Path, refresh: bool = False, endpoint: EndpointConfig | None = None,
              concurrency: int | None = None, cache_folder: str | Path | None = None) -> Path:
    """Ask the judge role (the run config's `llm.roles.judge`, or `endpoint`) for the Ragas
    faithfulness of every final, non-abstained answer of the run folder; contexts are the texts
    of the answer's cited documents (`answer_doc_ids`), else the top 3 of the ranking. Writes
    `judgments.parquet` atomically and returns its path. `refresh=True` opens the LLM cache in
    refresh mode for the judge client only (the run's other roles are not re-asked: the step
    reads traces, it never replays). Concurrency: `concurrency`, else the run config's."""
    with _quiet_instructor():
        return asyncio.run(ajudge_run(run_dir, refresh, endpoint, concurrency, cache_folder)).path


def judge_command(run_dir: Path, refresh: bool) -> int:
    """`harness judge RUN_DIR [--refresh]`: 0 done (a few judge errors are rows, not failures), 2 not
    a run folder or an unusable judge configuration, 3 more than half of the judgments failed
    (the endpoint is down or broken; the rows are written all the same). Prints one summary line."""
    from harness.evalset.load import EvalSetError

    run_dir = Path(run_dir)
    if not (run_dir / "manifest.json").exists():
        print(f"error: {run_dir}: not a run folder (no manifest.json)", file=sys.stderr)
        return 2
    try:
        with _quiet_instructor():
            summary = asyncio.run(ajudge_run(run_dir, refresh))
    except (ValueError, FileNotFoundError, RuntimeError, EvalSetError) as e:
        print(f"error: {run_dir}: {_first_lines(e, 3)}", file=sys.stderr)
        return 2
    print(f"judge: {summary.line()}")
    asked = summary.counts.get("ok", 0) + summary.counts.get("error", 0)
    if asked and summary.counts.get("error", 0) > asked / 2:
        print(f"infrastructure: {summary.counts['error']} of {asked} judgments failed (see the status column of "
              f"{summary.path}); exit 3", file=sys.stderr)
        return 3
    return 0
