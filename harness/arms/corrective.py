"""`corrective(top_k, max_rounds, start, route)`: the corrective loop. Each round retrieves
`top_k` hits for the current query; the grader judges them against the turn's standalone
question (the start rewrite's output, or the question itself), never against a later search
query; stop when sufficient, when no new query comes back, or at `max_rounds`. Answer only on
a positive verdict, with the source in brackets; otherwise abstain honestly in the turn's
language. Every new query passes the rewrite arms' guards (identifiers kept, entitlement
filters from the account, the start's validated filters). One trace row per round.

`route: simple_first`: a cheap first pass answers directly when the first hits are strong
(the best support, `harness/corpus/support.py`, at least `strong`), without the grader; only
the rest go through the loop."""
from __future__ import annotations

import json
from typing import Literal

from harness.arms.base import ArmResult, BaseArm, Params, TurnContext, register
from harness.arms.pipeline import answer_stage, search_async
from harness.arms.rewrite import ask_rewrite, llm_stats, restore_identifiers
from harness.corpus.support import SupportScorer
from harness.guards.filters import validate_filters
from harness.guards.identifiers import find_identifiers
from harness.roles.answer import abstention
from harness.roles.base import OFFLINE
from harness.roles.grade import Z_MIN, GradeOutput, grade_offline
from harness.roles.lang import detect_language
from harness.run.workers import off_loop


class CorrectiveParams(Params):
    top_k: int = 3
    max_rounds: int = 3
    start: Literal["original", "rewrite"] = "original"
    route: Literal["none", "simple_first"] = "none"
    strong: float = 9.75  # simple_first: support that counts as strong (scripts/calibrate_grader.py)
    support: Literal["sentence", "doc"] = "sentence"  # evidence units: a hit's sentences, or its chunks
    z_min: float = Z_MIN  # offline grader: support needed (chosen on the main split: scripts/calibrate_grader.py)
    lane: Literal["hybrid", "dense", "bm25"] = "hybrid"
    depth: int = 50
    last_n: int = 4


@register("corrective")
class Corrective(BaseArm):
    Params = CorrectiveParams

    @property
    def uses(self) -> tuple[str, ...]:
        return (("rewrite",) if self.params.start == "rewrite" else ()) + ("grade", "answer")

    @property
    def capabilities(self) -> frozenset[str]:
        start = {"proposes_filters"} if self.params.start == "rewrite" else set()
        return self.base_capabilities | {"loops", "answers"} | start

    @property
    def hits_per_round(self) -> int:
        return self.params.top_k

    async def run(self, ctx: TurnContext) -> list[ArmResult]:
        p = self.params
        lang = detect_language(ctx.turn.user)
        outcomes_start, ms_start = [], {}
        question, filters, ids = ctx.turn.user, list(ctx.inherited_filters), find_identifiers(ctx.turn.user)
        start_note = None
        start_filters = ([], [], [])
        if p.start == "rewrite":
            rw = await ask_rewrite(ctx, p.last_n)
            outcomes_start.append(rw)
            ms_start["rewrite"] = rw.ms
            proposed = [f.model_dump() for f in rw.value.filters] if rw.value else []
            val = validate_filters(proposed, ctx.info) if rw.value else None
            if val is not None:
                start_filters = (proposed, val.violations, val.removed)
            if rw.value is not None and not val.malformed:
                question, filters = rw.value.standalone, val.applied
                ids = sorted(set(ids) | set(rw.value.must_keep))
            else:
                start_note = rw.fallback or "filter validation failed: " + "; ".join(val.malformed)
        rows: list[ArmResult] = []
        tried: list[str] = []
        query = question
        # the grader judges every round against the same question: its baselines are computed once
        scorer = SupportScorer(ctx.index, question, "sentence" if p.support == "sentence" else "chunk")
        offline_grader = ctx.roles.backend("grade") == OFFLINE
        for rnd in range(1, p.max_rounds + 1):
            query = restore_identifiers(query, {}, ids)  # the guard: every round keeps the identifiers
            tried.append(query)
            r = await search_async(ctx, [query], filters, lane=p.lane, depth=max(p.depth, p.top_k), must_keep=ids)
            r.must_keep, r.fallback_reason = ids, start_note
            r.proposed_filters, r.filter_violations, r.filters_removed = start_filters
            hits = r.ranking[: p.top_k]
            # support orders the answer's evidence (sentences), feeds the router and the offline
            # grader; an LLM grader with `support: doc` needs none of it
            needed = p.support == "sentence" or (rnd == 1 and p.route == "simple_first") or offline_grader
            (support, evidence), r.ms["support"] = await off_loop(ctx.workers, scorer.score, hits) if needed else (({}, []), 0.0)
            outcomes = list(outcomes_start) if rnd == 1 else []
            if rnd == 1:
                r.ms.update(ms_start)
            best = max(support.values(), key=lambda s: s.z) if support else None
            if rnd == 1 and p.route == "simple_first" and best and best.z >= p.strong:
                r.verdict, r.verdict_reason = "routed", f"simple_first: best support {best.describe()} >= {p.strong}"
                outcomes += await answer_stage(ctx, question, r, top_k=p.top_k, must_answer=True, evidence=evidence)
                r.llm = llm_stats(outcomes)
                return [r]
            user = json.dumps({"question": question, "passages": [{"doc_id": d, "text": ctx.index.docs[d].text[:1500]} for d in hits],
                               "previous_queries": tried[:-1]}, ensure_ascii=False)
            g = await ctx.roles.call("grade", user, GradeOutput,
                                     lambda: grade_offline(question, [(ctx.index.docs[d].text, support[d]) for d in hits], p.z_min, tried),
                                     seed=ctx.seed)
            outcomes.append(g)
            r.ms["grade"] = g.ms
            if g.value is None:  # a failed grader call: judge nothing, abstain
                r.verdict, r.verdict_reason = "error", g.fallback
                r.fallback_reason = "; ".join(x for x in (r.fallback_reason, f"{g.fallback}; abstained") if x)
                r.llm = llm_stats(outcomes)
                rows.append(r)
                break
            r.verdict = "sufficient" if g.value.sufficient else "insufficient"
            r.verdict_reason = g.value.reason
            if g.value.sufficient:
                outcomes += await answer_stage(ctx, question, r, top_k=p.top_k, must_answer=True, evidence=evidence)
                r.llm = llm_stats(outcomes)
                rows.append(r)
                return rows
            r.llm = llm_stats(outcomes)
            rows.append(r)
            new = (g.value.new_query or "").strip()
            if not new or new in tried:
                r.verdict_reason += "; no new query: stop"
                break
            query = new
        last = rows[-1]
        last.answer, last.answer_doc_ids, last.abstained = abstention(lang), [], True
        return rows
