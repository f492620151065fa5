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
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import Field

from harness.arms.capability import Capability
from harness.arms.base import ArmResult, BaseArm, Params, TurnContext, register
from harness.arms.pipeline import answer_stage, search_async
from harness.arms.common import llm_stats
from harness.arms.rewrite import ask_rewrite
from harness.roles.rewrite import Method, RewriteOutput
from harness.corpus.support import SupportScorer
from harness.guards.filters import validate_filters
from harness.guards.identifiers import restore_identifiers
from harness.roles.answer import abstention
from harness.roles.base import OFFLINE
from harness.corpus.fusion import rrf
from harness.roles.grade import BELOW, Z_MIN, GradeOutput, grade_offline
from harness.roles.lang import detect_language
from harness.threads import off_loop


class CorrectiveParams(Params):
    top_k: int = Field(default=3, ge=1)
    max_rounds: int = Field(default=3, ge=1)
    start: Literal["original", "rewrite"] = "original"
    method: Method = "hqe"  # the offline rewrite of `start: rewrite` (docs/roles.md)
    route: Literal["none", "simple_first"] = "none"
    strong: float = 9.75  # simple_first: support that counts as strong (scripts/calibrate_grader.py)
    support: Literal["sentence", "doc"] = "sentence"  # evidence units: a hit's sentences, or its chunks
    z_min: float = Z_MIN  # offline grader: support needed (chosen on the main split: scripts/calibrate_grader.py)
    lane: Literal["hybrid", "dense", "bm25"] = "hybrid"
    depth: int = Field(default=50, ge=1)
    last_n: int = Field(default=4, ge=1)
    retry_query: Literal["grader", "rewriter"] = "grader"  # who writes the next round's query
    LATE: ClassVar[frozenset[str]] = frozenset({"retry_query"})


@register("corrective")
class Corrective(BaseArm):
    Params = CorrectiveParams

    @classmethod
    def uses_for(cls, p: CorrectiveParams) -> tuple[str, ...]:
        return (("rewrite",) if "rewrite" in (p.start, p.retry_query.replace("rewriter", "rewrite")) else ()) + \
            ("grade", "answer")

    @classmethod
    def capabilities_for(cls, p: CorrectiveParams) -> frozenset[Capability]:
        start = {Capability.PROPOSES_FILTERS} if p.start == "rewrite" else set()
        return cls.base_capabilities | {Capability.LOOPS, Capability.ANSWERS} | start

    @classmethod
    def unused_for(cls, p: CorrectiveParams, backends, rewrite_fields) -> set[str]:
        return super().unused_for(p, backends, rewrite_fields) | ({"method"} if p.start != "rewrite" else set())

    @classmethod
    def hits_per_round_for(cls, p: CorrectiveParams) -> int:
        return p.top_k

    async def _start(self, ctx: TurnContext) -> "_Start":
        """The question the grader judges every round against: the turn as typed, or the start
        rewrite's standalone question (its filters validated, its identifiers kept)."""
        st = _Start(ctx.turn.user, list(ctx.inherited_filters), list(ctx.identifiers))
        if self.params.start != "rewrite":
            return st
        rw = await ask_rewrite(ctx, self.params.last_n, method=self.params.method)
        st.outcomes.append(rw)
        st.ms["rewrite"] = rw.ms
        proposed = [f.model_dump() for f in rw.value.filters] if rw.value else []
        val = validate_filters(proposed, ctx.info) if rw.value else None
        if val is not None:
            st.proposed = (proposed, val.violations, val.removed)
        if rw.value is not None and not val.malformed:
            st.question, st.filters = rw.value.standalone, val.applied
            st.ids = sorted(set(st.ids) | set(rw.value.must_keep))
        else:
            st.note = rw.fallback or "filter validation failed: " + "; ".join(val.malformed)
        return st

    async def _answer(self, ctx, st: "_Start", r: ArmResult, outcomes: list, evidence) -> ArmResult:
        outcomes += await answer_stage(ctx, st.question, r, top_k=self.params.top_k, must_answer=True, evidence=evidence)
        r.llm = llm_stats(outcomes)
        return r

    async def _next_query(self, ctx, g, tried: list[str], carry: "_Start") -> str:
        """The next round's query: the grader's `new_query`, or (`retry_query: rewriter`) the
        rewrite role's, told what was tried and why it was not enough; its call counts in the
        round that issues the query (`carry`). Offline, the rewriter stands in with the offline
        grader's expansion."""
        if self.params.retry_query == "grader":
            return (g.value.new_query or "").strip()
        retry = {"previous_queries": list(tried), "reason": g.value.reason}
        rw = await ask_rewrite(ctx, self.params.last_n, retry=retry, method=self.params.method,
                               offline=lambda: RewriteOutput(standalone=g.value.new_query or " ", must_keep=[],
                                                             filters=[], confidence=0.5, variants=[], clarify=None))
        carry.outcomes.append(rw)
        carry.ms["rewrite"] = rw.ms
        return rw.value.standalone.strip() if rw.value is not None else (g.value.new_query or "").strip()

    def _fuse(self, r: ArmResult, seen: "_Seen", rnd: int) -> None:
        """A later round learns from the earlier ones: its ranking is fused (RRF) with theirs, so
        what they found stays in the list, and the hits already graded insufficient move below
        `top_k`, so the grader reads new passages."""
        k = self.params.top_k
        if seen.ranking:
            fused = [d for d, _ in rrf([seen.ranking, r.ranking])]
            fresh = [d for d in fused if d not in seen.graded][:k]
            r.ranking = fresh + [d for d in fused if d not in fresh]
            earlier = "round 1's" if rnd == 2 else f"rounds 1-{rnd - 1}'s"
            r.lanes.append(f"fused with {earlier} ranking (RRF); {len(seen.graded)} hit(s) "
                           f"graded insufficient before moved below top_k={k}")
        seen.ranking = list(r.ranking)
        seen.graded.update(r.ranking[:k])

    async def _below(self, ctx, r: ArmResult, seen: "_Seen", scorer) -> list:
        """The offline grader's feedback pool: (text, support) of the passages below the hits,
        never graded yet (support of the question, as the hits')."""
        k = self.params.top_k
        cand = [d for d in r.ranking[k:k + BELOW] if d not in seen.graded]
        if not cand or ctx.roles.backend("grade") != OFFLINE:
            return []
        (support, _), ms = await off_loop(ctx.threads, scorer.score, cand)
        r.ms.support += ms
        return [(ctx.index.docs[d].text, support[d]) for d in cand if d in support]

    async def _round(self, ctx, st: "_Start", rnd: int, query: str, tried: list[str], scorer, carry: "_Start",
                     seen: "_Seen"):
        """One round: search, support, the router or the grader. Returns (row, grade outcome or
        None when the row is final already)."""
        p = self.params
        r = await search_async(ctx, [query], st.filters, lane=p.lane, depth=max(p.depth, p.top_k), must_keep=st.ids)
        self._fuse(r, seen, rnd)
        r.must_keep, r.fallback_reason = st.ids, st.note
        r.proposed_filters, r.filter_violations, r.filters_removed = st.proposed
        hits = r.ranking[: p.top_k]
        # support orders the answer's evidence (sentences), feeds the router and the offline
        # grader; an LLM grader with `support: doc` needs none of it
        needed = p.support == "sentence" or (rnd == 1 and p.route == "simple_first") or \
            ctx.roles.backend("grade") == OFFLINE
        (support, evidence), r.ms.support = await off_loop(ctx.threads, scorer.score, hits) if needed else (({}, []), 0.0)
        outcomes = list((st if rnd == 1 else carry).outcomes)
        r.ms.add(**(st if rnd == 1 else carry).ms)
        best = max(support.values(), key=lambda s: s.z) if support else None
        if rnd == 1 and p.route == "simple_first" and best and best.z >= p.strong:
            r.verdict, r.verdict_reason = "routed", f"simple_first: best support {best.describe()} >= {p.strong}"
            return await self._answer(ctx, st, r, outcomes, evidence), None
        below = await self._below(ctx, r, seen, scorer)
        user = json.dumps({"question": st.question,
                           "passages": [{"doc_id": d, "text": ctx.index.docs[d].text[:1500]} for d in hits],
                           "previous_queries": tried[:-1]}, ensure_ascii=False)
        g = await ctx.roles.call("grade", user, GradeOutput, lambda: grade_offline(
            st.question, [(ctx.index.docs[d].text, support[d]) for d in hits], p.z_min, tried,
            [ctx.index.docs[d].text for d in sorted(seen.graded - set(hits))], below),
            seed=ctx.seed)
        outcomes.append(g)
        r.ms.grade = g.ms
        if g.value is None:  # a failed grader call: judge nothing, abstain
            r.verdict, r.verdict_reason = "error", g.fallback
            r.fallback_reason = "; ".join(x for x in (r.fallback_reason, f"{g.fallback}; abstained") if x)
        else:
            r.verdict, r.verdict_reason = ("sufficient" if g.value.sufficient else "insufficient"), g.value.reason
            if g.value.sufficient:
                return await self._answer(ctx, st, r, outcomes, evidence), None
        r.llm = llm_stats(outcomes)
        return r, g

    async def run(self, ctx: TurnContext) -> list[ArmResult]:
        st = await self._start(ctx)
        rows: list[ArmResult] = []
        tried: list[str] = []
        query = restore_identifiers(st.question, {}, st.ids)  # the guard: every issued query keeps the identifiers
        # the grader judges every round against the same question: its baselines are computed once
        scorer = SupportScorer(ctx.index, st.question, "sentence" if self.params.support == "sentence" else "chunk")
        carry = _Start("", [], [])  # the next round's query: the calls that wrote it
        seen = _Seen()
        for rnd in range(1, self.params.max_rounds + 1):
            tried.append(query)
            r, g = await self._round(ctx, st, rnd, query, tried, scorer, carry, seen)
            rows.append(r)
            if g is None:  # answered (routed or sufficient)
                return rows
            if g.value is None or (rnd == self.params.max_rounds and self.params.retry_query == "rewriter"):
                break  # (no round left: the rewriter is not asked for a query nobody would issue)
            carry = _Start("", [], [])
            new = await self._next_query(ctx, g, tried, carry)
            new = new and restore_identifiers(new, {}, st.ids)  # the guard, before the repeat check: a repeat is a repeat
            if not new or new in tried:
                r.verdict_reason += "; no new query: stop"
                break
            query = new
        last = rows[-1]
        last.answer, last.answer_doc_ids, last.abstained = abstention(detect_language(ctx.turn.user)), [], True
        return rows


@dataclass
class _Start:
    question: str
    filters: list[dict]
    ids: list[str]
    note: str | None = None  # why the start rewrite was not used
    proposed: tuple = ([], [], [])  # proposed filters, violations, removed
    outcomes: list = field(default_factory=list)
    ms: dict = field(default_factory=dict)


@dataclass
class _Seen:
    """What the loop's earlier rounds saw: their fused ranking and the hits graded."""
    ranking: list[str] = field(default_factory=list)
    graded: set[str] = field(default_factory=set)
