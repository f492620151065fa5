"""The relevance-labelling step (`harness judge RUN --relevance`): the relevance role
(harness/roles/relevance.py, an UMBRELA-style 0-3 grade in strict JSON) asked about every
document in the top k of any arm's final ranking that no person labelled for its turn (a hole),
and about a sample of the pairs people did label (to measure agreement). Every call goes through
the LLM layer (cache, replay, retries, rate budgets, the run's spend cap). The grades go to the run
folder's relevance labels (harness/store/folder.py) with their provenance (model, prompt name@hash,
time, cache hit), never into the eval set's labels; `harness metrics RUN --qrels human+llm` scores with them
(harness/metrics/qrels.py).

Only turns with human labels are considered: a turn nobody labelled stays unmeasured. A failed
call is a row with status `error: ...` and no grade (the hole stays a hole); without an endpoint
every pair is `not measured: no judge endpoint`. A stop (the spend cap, a replay-mode cache miss)
keeps what was graded and marks the rest `not asked: ...`; the command exits 3."""
from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from harness.errors import BadInput
from harness.llm.client import EndpointConfig, LLMClient
from harness.llm.transport import StopRun
from harness.roles.base import NOT_MEASURED
from harness.roles.prompts import Prompt, load_prompt
from harness.roles.relevance import (AGREEMENT, DEFAULT_GRADE_MAP, HOLE, OK, PROMPT, ROLE, RelevanceOutput,
                                     grade_map_text, relevance_message)
from harness.store.folder import RunFolder
from harness.store.holes import holes, top_grade
from harness.unmeasured import Unmeasured

DEPTH = 10  # the top k graded: judged@10's k
SAMPLE = 100  # labelled pairs graded for agreement

SCHEMA = pa.schema([
    ("session_id", pa.string()), ("turn_index", pa.int32()), ("doc_id", pa.string()),
    ("purpose", pa.string()),  # hole: no person labelled it; agreement: a labelled pair, graded to compare
    ("arms", pa.list_(pa.string())),  # the arms whose top k held the document (holes)
    ("human_grade", pa.int32()),  # people's grade (agreement pairs); null for holes
    ("llm_grade", pa.int32()),  # 0-3, null unless status == ok
    ("qrel_grade", pa.int32()),  # llm_grade on the eval set's scale (the grade map)
    ("status", pa.string()), ("model", pa.string()), ("prompt", pa.string()),
    ("labelled_at", pa.string()), ("cache_hit", pa.bool_()),
    ("depth", pa.int32()), ("grade_map", pa.string()),  # the step's settings: scoring checks them
])


@dataclass
class RelevanceSummary:
    path: Path
    model: str | None
    depth: int
    counts: dict[str, int] = field(default_factory=dict)  # per purpose and status class
    http_calls: int = 0
    cache_hits: int = 0
    stopped: str | None = None  # why the step stopped before asking every pair
    kept: int = 0  # pairs not graded now that kept an earlier grade (same model, prompt, grade map)

    def n(self, purpose: str, status: str | None = None) -> int:
        return sum(v for (p, s), v in self.counts.items() if p == purpose and (status is None or s == status))

    def line(self) -> str:
        holes, sample = self.n(HOLE), self.n(AGREEMENT)
        if self.model is None:
            return (f"relevance not labelled (no judge endpoint): {holes} hole(s) in the top {self.depth}; "
                    f"{self.path}")
        return (f"relevance: {self.n(HOLE, OK)}/{holes} hole(s) in the top {self.depth} labelled, "
                f"{self.n(AGREEMENT, OK)}/{sample} labelled pair(s) graded for agreement, "
                f"{self.n(HOLE, 'error') + self.n(AGREEMENT, 'error')} failed"
                f"{f' ({self.kept} kept their earlier grade)' if self.kept else ''}; model {self.model}, "
                f"{self.http_calls} HTTP call(s), {self.cache_hits} cache hit(s); {self.path}")

    @property
    def mostly_failed(self) -> bool:
        asked = sum(v for (_, s), v in self.counts.items() if s in (OK, "error"))
        return bool(asked) and sum(v for (_, s), v in self.counts.items() if s == "error") > asked / 2


# ---- the pairs ------------------------------------------------------------------------------

def _turn_labels(folder: RunFolder) -> dict[tuple[str, int], dict]:
    """(session, turn) -> its labels row, for turns people labelled."""
    labels = folder.labels_table().to_pylist()
    return {(r["session_id"], int(r["turn_index"])): r for r in labels if r["qrels_measured"]}


def _order(key: tuple) -> str:
    return hashlib.sha256("\x1f".join(map(str, key)).encode()).hexdigest()


def sample_labelled(turns: dict, n: int) -> list[tuple[str, int, str, int]]:
    """Up to `n` labelled pairs (session, turn, document, grade), the same on every run of the
    labels: taken in a fixed pseudo-random order, one grade after another so that every grade
    people used is in the sample."""
    by_grade: dict[int, list] = {}
    for (s, t), lab in turns.items():
        for d, g in json.loads(lab["qrels"] or "{}").items():
            by_grade.setdefault(int(g), []).append((s, t, d, int(g)))
    queues = [sorted(v, key=_order) for _, v in sorted(by_grade.items())]
    out: list = []
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return sorted(out)


def _queries(folder: RunFolder, turns: dict) -> tuple[dict, dict[str, str]]:
    """(session, turn) -> (query, earlier user turns), and the documents' texts. The query is
    the turn's reference rewrite (a person's standalone question) when the eval set has one,
    else the user's text."""
    from harness.evalset.load import iter_labelled, load_eval_set

    es = load_eval_set(folder.require_eval_set(why=" (the documents to grade are there)"))
    out = {}
    for s, i, tix, t in iter_labelled(es):
        lab = turns.get((s.session_id, tix))
        if lab is not None:
            query = lab.get("reference_rewrite") or t.user
            out[(s.session_id, tix)] = (query, [u.user for u in s.turns[:i]])
    return out, {d: doc.passage for d, doc in es.docs.items()}


# ---- the calls ----------------------------------------------------------------------------

@dataclass
class _Ask:
    client: LLMClient
    prompt: Prompt
    sem: asyncio.Semaphore
    grade_map: tuple[int, ...]
    stopped: str | None = None

    async def grade(self, rec: dict, user: str) -> None:
        if self.stopped:
            rec["status"] = Unmeasured.NOT_ASKED.said(self.stopped)
            return
        async with self.sem:
            if self.stopped:
                rec["status"] = Unmeasured.NOT_ASKED.said(self.stopped)
                return
            try:
                res = await self.client.structured(ROLE, self.prompt.text, user, RelevanceOutput)
            except StopRun as e:
                self.stopped = str(e).splitlines()[0][:200] or type(e).__name__
                rec["status"] = Unmeasured.NOT_ASKED.said(self.stopped)
                return
        rec["cache_hit"] = res.record.cache_hit
        if res.value is None:
            rec["status"] = Unmeasured.ERROR.said(str(res.record.error))
            return
        g = int(res.value.relevance)
        rec.update(status=OK, llm_grade=g, qrel_grade=self.grade_map[g])


def _record(key, purpose: str, arms, human, ep, prompt, now, depth: int, gmap: str) -> dict:
    s, t, d = key
    return {"session_id": s, "turn_index": t, "doc_id": d, "purpose": purpose, "arms": arms, "human_grade": human,
            "llm_grade": None, "qrel_grade": None, "status": NOT_MEASURED if ep is None else None,
            "model": ep.model if ep is not None else None, "prompt": prompt.ref if ep is not None else None,
            "labelled_at": now, "cache_hit": None, "depth": depth, "grade_map": gmap}


def _earlier(folder: RunFolder) -> dict[tuple, dict]:
    """The folder's earlier grades: (session, turn, document, purpose) -> its ok row."""
    if not folder.has_relevance_labels():
        return {}
    rel = folder.relevance_labels()
    if not {"status", "purpose", "doc_id"} <= set(rel.columns):
        return {}
    ok = rel[rel["status"] == OK]
    return {(r["session_id"], int(r["turn_index"]), r["doc_id"], r["purpose"]): r for r in ok.to_dict("records")}


def _keep_earlier(recs: list[dict], earlier: dict[tuple, dict]) -> int:
    """A pair this step did not grade (an error, a stop) keeps its earlier grade by the same model,
    prompt and grade map, the reply the cache would have given; how many were kept."""
    kept = 0
    for r in recs:
        old = earlier.get((r["session_id"], r["turn_index"], r["doc_id"], r["purpose"]))
        if r["status"] != OK and old is not None and r["model"] is not None and \
                all(old.get(k) == r[k] for k in ("model", "prompt", "grade_map")):
            r.update(status=OK, llm_grade=old["llm_grade"], qrel_grade=old["qrel_grade"],
                     labelled_at=old.get("labelled_at"), cache_hit=None)
            kept += 1
    return kept


def _checks(folder: RunFolder, ep, prompt: Prompt, grade_map, turns: dict, earlier: dict) -> None:
    """What the step refuses before it asks anything (exit 2)."""
    if ep is None and earlier:
        raise BadInput(f"{folder.path}: no judge endpoint, and the folder holds {len(earlier)} LLM relevance "
                       "grade(s) this would replace with none: give --endpoint/--model (or --config), or delete "
                       "its relevance labels first")
    if not prompt.text.strip():
        raise BadInput(f"prompt {prompt.path or prompt.name}: empty")
    top = top_grade(lab["qrels"] for lab in turns.values())
    if max(grade_map) > top:
        raise BadInput(f"--grade-map {grade_map_text(grade_map)}: grade {max(grade_map)} is above the eval set's "
                       f"scale (people's grades go to {top}); map the LLM's 0-3 into 0-{top}")


def relevance_endpoint(config: dict) -> EndpointConfig | None:
    """The run config's `llm.roles.relevance`, else its judge."""
    from harness.roles.base import LLMConfig

    roles = LLMConfig.model_validate(config.get("llm") or {}).roles
    return roles.get(ROLE) or roles.get("judge")


def _client(config: dict, ep: EndpointConfig, mode: str | None, concurrency: int, cache_folder) -> LLMClient:
    from harness.llm.ledger import SpendCap, check_priced, load_prices
    from harness.roles.base import step_cache

    llm = config.get("llm") or {}
    cache = step_cache(config, cache_folder, mode)
    prices = load_prices(llm.get("prices"))
    spend = None
    if llm.get("max_cost_usd") is not None:
        check_priced(prices, {ROLE: ep.model})
        spend = SpendCap(float(llm["max_cost_usd"]))
    return LLMClient(ep, cache, prices=prices, connections=concurrency, spend=spend)


async def arelevance_run(run_dir: Path, endpoint: EndpointConfig | None = None, depth: int = DEPTH,
                         sample: int = SAMPLE, prompt: str | None = None, grade_map=DEFAULT_GRADE_MAP,
                         refresh: bool = False, concurrency: int | None = None,
                         cache_folder: str | Path | None = None, cache_mode: str | None = None) -> RelevanceSummary:
    """Grade the holes in the top `depth` of every arm and `sample` labelled pairs; write the
    table; return the summary. `cache_mode`: the LLM cache's mode over the run config's
    (`replay`: nothing is sent; a pair the cache lacks stops the step)."""
    folder = RunFolder(run_dir).require()
    config = folder.read_manifest().config
    ep = endpoint if endpoint is not None else relevance_endpoint(config)
    spec = prompt or (getattr(ep, "prompt", None) if ep is not None else None) or PROMPT
    the_prompt = load_prompt(spec)
    turns, earlier = _turn_labels(folder), _earlier(folder)
    _checks(folder, ep, the_prompt, grade_map, turns, earlier)
    now, gmap = datetime.now(timezone.utc).isoformat(timespec="seconds"), grade_map_text(grade_map)
    recs = [_record(k, HOLE, arms, None, ep, the_prompt, now, depth, gmap)
            for k, arms in holes(folder, turns, depth).items()]
    recs += [_record((s, t, d), AGREEMENT, [], g, ep, the_prompt, now, depth, gmap)
             for s, t, d, g in sample_labelled(turns, sample)]
    summary = RelevanceSummary(folder.path, ep.model if ep is not None else None, depth)
    if ep is not None and recs:
        queries, docs = _queries(folder, turns)
        n = concurrency or int(config.get("concurrency") or 16)
        client = _client(config, ep, "refresh" if refresh else cache_mode, n, cache_folder)
        ask = _Ask(client, the_prompt, asyncio.Semaphore(n), tuple(grade_map))
        try:
            jobs = []
            for r in recs:
                q = queries.get((r["session_id"], r["turn_index"]))
                text = docs.get(r["doc_id"])
                if q is None or text is None:
                    r["status"] = Unmeasured.SKIPPED.said("no question text for this turn" if q is None
                                                          else "the document is not in the eval set")
                    continue
                jobs.append(ask.grade(r, relevance_message(q[0], q[1], text)))
            await asyncio.gather(*jobs)
        finally:
            summary.http_calls, summary.cache_hits = client.stats.http_calls, client.stats.cache_hits
            await client.aclose()
        summary.stopped = ask.stopped
        summary.kept = _keep_earlier(recs, earlier)
    summary.path = folder.write_relevance_labels(pa.Table.from_pylist(recs, schema=SCHEMA))
    for r in recs:
        kind = Unmeasured.of(r["status"])
        key = (r["purpose"], OK if kind is None else kind.value)
        summary.counts[key] = summary.counts.get(key, 0) + 1
    return summary


def relevance_command(run_dir: Path, endpoint: EndpointConfig | None = None, **kw) -> RelevanceSummary:
    """`harness judge RUN --relevance`; BadInput when the folder, the prompt or the endpoint is unusable."""
    from harness.evalset.load import EvalSetError

    RunFolder(run_dir).require()
    try:
        return asyncio.run(arelevance_run(Path(run_dir), endpoint, **kw))
    except (ValueError, FileNotFoundError, EvalSetError) as e:
        raise BadInput(f"{run_dir}: {str(e).splitlines()[0]}") from None
