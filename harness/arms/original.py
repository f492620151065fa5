from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.arms.capability import Capability
from harness.arms.base import ArmResult, BaseArm, Params, TurnContext, register
from harness.arms.common import llm_stats
from harness.arms.pipeline import answer_stage, search_async


class LaneParams(Params):
    lane: Literal["hybrid", "dense", "bm25"] = "hybrid"
    depth: int = Field(default=100, ge=1)
    id_lane: bool = True  # the exact identifier lane, as the rewrite arms have it: arms differ in their query, not their lanes
    answer: bool = False  # the answer role on the top hits, so answer metrics compare across all arms


class SingleQueryArm(BaseArm):
    """An arm that issues one query it builds without a model; optionally answers."""

    Params = LaneParams

    @classmethod
    def uses_for(cls, p: LaneParams) -> tuple[str, ...]:
        return ("answer",) if p.answer else ()

    def query(self, ctx: TurnContext) -> tuple[str, list[dict]] | None:
        raise NotImplementedError

    async def run(self, ctx: TurnContext):
        q = self.query(ctx)
        if q is None:
            return [ArmResult(not_applicable=self.not_applicable)]
        text, filters = q
        p = self.params
        r = await search_async(ctx, [text], filters, lane=p.lane, depth=p.depth, pool=max(p.depth, 100), id_lane=p.id_lane)
        if self.params.answer:
            r.llm = llm_stats(await answer_stage(ctx, text, r))
        return [r]


@register("original")
class Original(SingleQueryArm):
    """The last user turn as it was typed, with the inherited filters."""

    base_capabilities = SingleQueryArm.base_capabilities | {Capability.REFERENCE}

    def query(self, ctx: TurnContext):
        return ctx.turn.user, ctx.inherited_filters
