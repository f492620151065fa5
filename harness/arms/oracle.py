from __future__ import annotations

from harness.arms.base import ArmResult, BaseArm, TurnContext, register
from harness.arms.original import LaneParams
from harness.arms.retrieval import retrieve_one


@register("oracle")
class Oracle(BaseArm):
    """The reference rewrite with the expected filters: an upper bound for rewriting. Turns
    without a reference rewrite are n/a (recorded, never hidden)."""

    Params = LaneParams

    async def run(self, ctx: TurnContext):
        lab = ctx.turn.labels
        if lab is None or not lab.reference_rewrite:
            return [ArmResult(issued_queries=[], lanes=[], applied_filters=[], candidates=[], ranking=[],
                              not_applicable="no reference rewrite")]
        filters = [f.model_dump() for f in lab.expected_filters]
        return [retrieve_one(ctx, lab.reference_rewrite, filters, self.params.lane, self.params.depth)]
