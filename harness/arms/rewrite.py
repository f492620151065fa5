"""`rewrite`: one standalone query from the rewrite role (an LLM through the LLM layer, or the
offline rules), with the guards: identifiers masked before a model sees the turn and restored
after, proposed filters validated against the schema (entitlement fields rejected and
counted), entitlement filters from the account on every lane. A failed rewrite falls back to
the original query plus the inherited filters, and the row says why."""
from __future__ import annotations

import re
import time
from typing import Literal

from harness.arms.base import ArmResult, BaseArm, Params, TurnContext, register
from harness.arms.retrieval import retrieve_one
from harness.guards.filters import validate_filters
from harness.guards.identifiers import find_identifiers, mask, unmask
from harness.roles.rewrite import RewriteOutput, rewrite_offline
from harness.roles.state import compact_state


class RewriteParams(Params):
    lane: Literal["hybrid", "dense", "bm25"] = "hybrid"
    depth: int = 100
    last_n: int = 4  # turns of history in the compact state


def restore_identifiers(text: str, mapping: dict[str, str], ids: list[str]) -> str:
    """Put placeholders back; an identifier of the turn that the model dropped or altered is
    prepended verbatim."""
    text = unmask(text, mapping)
    for i in ids:
        if not re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text):
            text = f"{i} {text}"
    return text


async def run_rewrite(ctx: TurnContext, roles, last_n: int) -> tuple[RewriteOutput | None, dict, str | None]:
    """Ask the rewrite role. Returns (output with identifiers restored, llm stats, fallback reason)."""
    ids = find_identifiers(ctx.turn.user)
    masked, mapping = mask(ctx.turn.user)
    state = compact_state(ctx, last_n)
    masked_state = compact_state(ctx, last_n, turn_text=masked)
    out = await roles.call("rewrite", masked_state.to_prompt(), RewriteOutput, lambda: rewrite_offline(state),
                           seed=ctx.seed)
    llm = llm_stats([out])
    if out.value is None:
        return None, llm, out.fallback
    v: RewriteOutput = out.value
    if out.backend != "offline":
        v = v.model_copy(update={
            "standalone": restore_identifiers(v.standalone, mapping, ids),
            "variants": [unmask(x, mapping) for x in v.variants],
            "must_keep": sorted(set([unmask(x, mapping) for x in v.must_keep] + ids)),
        })
    if not v.standalone.strip():
        return None, llm, "rewrite returned an empty query"
    return v, llm, None


def llm_stats(outcomes) -> dict:
    recs = [o.record for o in outcomes if o is not None and o.record is not None]
    costs = [r.cost_usd for r in recs]
    return {
        "calls": sum(r.attempts for r in recs),
        "prompt_tokens": sum(r.prompt_tokens for r in recs),
        "completion_tokens": sum(r.completion_tokens for r in recs),
        "cost_usd": (None if any(c is None for c in costs) else float(sum(costs))) if recs else None,
        "cache_hits": sum(1 for r in recs if r.cache_hit),
        "prompt_hashes": {r.role: r.prompt_hash for r in recs if r.prompt_hash},
        "ms": sum(o.ms for o in outcomes if o is not None),
    }


@register("rewrite")
class Rewrite(BaseArm):
    Params = RewriteParams
    uses = ("rewrite",)

    async def run(self, ctx: TurnContext):
        t0 = time.perf_counter()
        out, llm, fallback = await run_rewrite(ctx, ctx.roles, self.params.last_n)
        ms_rewrite = (time.perf_counter() - t0) * 1000
        val = validate_filters([f.model_dump() for f in out.filters], ctx.info) if out is not None else None
        malformed = [x for x in val.removed if "entitlement field" not in x] if val else []
        if out is not None and malformed:
            fallback = "filter validation failed: " + "; ".join(malformed)
        if out is None or malformed:
            r = retrieve_one(ctx, ctx.turn.user, ctx.inherited_filters, self.params.lane, self.params.depth)
            r.fallback_reason = fallback
            r.must_keep = find_identifiers(ctx.turn.user)
        else:
            r = retrieve_one(ctx, out.standalone, val.applied, self.params.lane, self.params.depth)
            r.must_keep = out.must_keep
            r.clarify = out.clarify.model_dump() if out.clarify else None
        if val is not None:
            r.proposed_filters = [f.model_dump() for f in out.filters]
            r.filter_violations = val.violations
            r.filters_removed = val.removed
        r.llm = llm
        r.ms["rewrite"] = llm.get("ms") or ms_rewrite
        return [r]
