"""The rewrite family: one standalone query from the rewrite role (an LLM through the LLM
layer, or the offline rules), with the guards: identifiers masked before a model sees the
turn and restored after, proposed filters validated against the schema (entitlement fields
rejected and counted), entitlement filters from the account on every lane. A failed or late
rewrite, or a malformed filter, falls back to the original query plus the inherited filters,
and the row says why. Options (all part of the id): `decide` rewrites only turns the decide
role says need it; `budget_ms` bounds the rewrite; `rerank` and `answer` add those stages;
`id_lane` puts identifiers into an exact-match lexical lane of their own.

`rewrite` is the single-query arm; `rewrite_hyde`, `multi_query_rrf` and `rewrite_adaptive`
override `queries()` / `vectors()` (one file each)."""
from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field

from harness.arms.capability import Capability
from harness.arms.base import ArmResult, BaseArm, Params, TurnContext, register
from harness.arms.pipeline import answer_stage, rerank_stage, search_async
from harness.guards.filters import validate_filters
from harness.arms.common import llm_stats
from harness.guards.identifiers import mask, restore_identifiers, unmask
from harness.llm.ledger import TIME_BUDGET, RoleTimeout, TimeBudget
from harness.roles.base import Outcome
from harness.roles.decide import Decision, decide_offline
from harness.roles.rewrite import Method, RewriteOutput, offline_rewrite
from harness.arms.state import compact_state
from harness.roles.state import CompactState


class RewriteParams(Params):
    method: Method = "hqe"  # the offline rewrite (docs/roles.md); an LLM rewrite ignores it
    lane: Literal["hybrid", "dense", "bm25"] = "hybrid"
    depth: int = Field(default=100, ge=1)
    last_n: int = Field(default=4, ge=1)  # turns of history in the compact state
    decide: bool = False  # rewrite only when the decide role says the turn needs it
    budget_ms: int = Field(default=0, ge=0)  # rewrite time budget; 0 = none
    id_lane: bool = True
    rerank: bool = False
    answer: bool = False
    pool: int = Field(default=100, ge=1)  # cap of the fused candidate pool
    rrf_k: int = Field(default=60, ge=0)


RETRY = ("The queries tried so far did not find what answers the question (grader: {reason}). Write a different "
         "standalone query for the same question, not one of previous_queries.")


async def ask_rewrite(ctx: TurnContext, last_n: int, state: CompactState | None = None, retry: dict | None = None,
                      offline=None, method: str = "hqe"):
    """The rewrite role's outcome, identifiers restored in an LLM's output. `state`: the turn's
    compact state when the caller has built it already (for the decide role). `retry`: a
    corrective loop asking for its next query ({previous_queries, reason}); `offline`: the
    offline role's answer to it, else the offline rewrite by `method`."""
    ids = ctx.identifiers
    masked, mapping = mask(ctx.turn.user, ids)  # ids: the turn's, found when its context was made
    state = state or compact_state(ctx, last_n)
    if retry is not None:
        retry = {"instruction": RETRY.format(reason=retry.get("reason") or "insufficient"),
                 "previous_queries": [mask(q)[0] for q in retry.get("previous_queries", [])]}
    masked_state = dataclasses.replace(state, turn=masked, retry=retry)  # a model never sees the identifiers
    out = await ctx.roles.call("rewrite", masked_state.to_prompt(), RewriteOutput,
                               offline or (lambda: offline_rewrite(method, state, ctx.index)), seed=ctx.seed)
    if out.value is not None and out.backend != "offline":
        v = out.value
        out.value = v.model_copy(update={
            "standalone": restore_identifiers(v.standalone, mapping, ids),
            "variants": [restore_identifiers(x, mapping, ids) for x in v.variants],
            "must_keep": sorted(set([unmask(x, mapping) for x in v.must_keep] + ids)),
        })
    if out.value is not None and not out.value.standalone.strip():
        out.value, out.fallback = None, "rewrite returned an empty query"
    return out


class RewriteFamily(BaseArm):
    Params = RewriteParams
    base_capabilities = BaseArm.base_capabilities | {Capability.ASKS_BACK, Capability.PROPOSES_FILTERS}

    @classmethod
    def uses_for(cls, p: RewriteParams) -> tuple[str, ...]:
        return tuple(r for r, on in (("decide", p.decide or cls.needs_decide), ("rewrite", True),
                                     ("hyde", cls.needs_hyde), ("rerank", p.rerank), ("answer", p.answer)) if on)

    needs_decide = False
    needs_hyde = False

    async def queries(self, ctx: TurnContext, out: RewriteOutput, outcomes: list, notes: list[str]) -> list[str]:
        """The queries to issue (first = main). Per-turn notes go to `notes`, never to self:
        turns run concurrently on one arm object."""
        return [out.standalone]

    async def vectors(self, ctx: TurnContext, out: RewriteOutput, queries: list[str], decision, outcomes: list,
                      notes: list[str], fallbacks: list[str]):
        """Query vectors overriding the queries' embeddings, or None. Notes go to `notes`; a
        failed role call that the arm stood in for goes to `fallbacks` (the row's fallback_reason)."""
        return None

    async def run(self, ctx: TurnContext):
        p = self.params
        outcomes, ms = [], {}
        decision, notes_decide, state = None, None, None
        if p.decide or self.needs_decide:
            state = compact_state(ctx, p.last_n)
            d = await ctx.roles.call("decide", state.to_prompt(), Decision, lambda: decide_offline(state), seed=ctx.seed)
            outcomes.append(d)
            ms["decide"] = d.ms
            decision = d.value
            if decision is None:  # a failed decide call: rewrite anyway (the safe side) and say so
                notes_decide = f"{d.fallback}; rewriting without a decision"
        search_kw = dict(lane=p.lane, depth=p.depth, rrf_k=p.rrf_k, pool=p.pool, id_lane=p.id_lane)

        async def search_turn():  # the turn as typed, with its identifiers kept
            ids = ctx.identifiers
            r = await search_async(ctx, [ctx.turn.user], ctx.inherited_filters, must_keep=ids, **search_kw)
            r.must_keep = ids
            return r

        if p.decide and decision is not None and not decision.needs_rewrite:
            r = await search_turn()
            r.verdict_reason = f"decide: {decision.turn_class}, no rewrite needed ({decision.reason})"
            return [await self._finish(ctx, r, ctx.turn.user, decision, outcomes, ms)]
        out, fallback = await self._rewrite(ctx, state, outcomes, ms)
        proposed = [f.model_dump() for f in out.filters] if out is not None else []
        val = validate_filters(proposed, ctx.info) if out is not None else None
        malformed = val.malformed if val else []
        if out is not None and malformed:
            fallback = "filter validation failed: " + "; ".join(malformed)
        if out is None or malformed:
            r = await search_turn()
            r.fallback_reason, question = fallback, ctx.turn.user
        else:
            # a rewrite asked for fewer fields (`fields:`): which ones the offline method wrote
            notes: list[str] = [f"rewrite: {', '.join(o.offline_fields)} from the offline method {p.method}"
                                for o in outcomes[-1:] if getattr(o, "offline_fields", ())]
            fallbacks: list[str] = []
            # the identifier guard holds for every issued query, variants included
            qs = [restore_identifiers(q, {}, out.must_keep) for q in await self.queries(ctx, out, outcomes, notes)]
            vecs = await self.vectors(ctx, out, qs, decision, outcomes, notes, fallbacks)
            r = await search_async(ctx, qs, val.applied, must_keep=out.must_keep, vectors=vecs, **search_kw)
            r.must_keep, question = out.must_keep, out.standalone
            r.clarify = out.clarify.model_dump() if out.clarify else None
            r.verdict_reason = "; ".join(notes) or None
            if fallbacks:
                r.fallback_reason = "; ".join(x for x in (r.fallback_reason, *fallbacks) if x)
        if notes_decide:
            r.fallback_reason = "; ".join(x for x in (notes_decide, r.fallback_reason) if x)
        if val is not None:
            r.proposed_filters = proposed
            r.filter_violations = val.violations
            r.filters_removed = val.removed
        return [await self._finish(ctx, r, question, decision, outcomes, ms)]

    async def _rewrite(self, ctx: TurnContext, state, outcomes: list, ms: dict):
        """The rewrite role within the arm's budget: (output or None, fallback reason). The budget
        counts the role's own time, its HTTP exchanges and retry pauses (harness.llm.ledger.
        TimeBudget), never the wait for a request slot; the offline methods are not bounded. A
        cached reply is charged its stored latency, as its live call was. Its ms is
        the role's own time, or what the budget spent when the role did not answer in it."""
        p = self.params
        budget = TimeBudget(p.budget_ms / 1000) if p.budget_ms else None
        token = TIME_BUDGET.set(budget)
        try:
            rw = await ask_rewrite(ctx, p.last_n, state, method=p.method)
        except RoleTimeout as e:
            if e.record is not None and e.record.requests:  # a reply it had paid for before the budget ran out
                outcomes.append(Outcome(None, ctx.roles.backend("rewrite"), e.record))
            ms["rewrite"] = budget.used * 1000 if budget is not None else 0.0
            return None, f"rewrite timed out after {p.budget_ms} ms" + (f" ({e})" if e.args else "")
        finally:
            TIME_BUDGET.reset(token)
        outcomes.append(rw)
        ms["rewrite"] = rw.ms
        return rw.value, rw.fallback

    async def _finish(self, ctx, r: ArmResult, question: str, decision, outcomes: list, ms: dict) -> ArmResult:
        if decision is not None:
            r.turn_class = decision.turn_class
        if self.params.rerank:
            outcomes += await rerank_stage(ctx, question, r, self.params.pool)
        if self.params.answer:
            outcomes += await answer_stage(ctx, question, r)
        r.llm = llm_stats(outcomes)
        r.ms.add(**ms)
        return r


@register("rewrite")
class Rewrite(RewriteFamily):
    """One standalone query."""
