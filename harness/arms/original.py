from __future__ import annotations

from typing import Literal

from harness.arms.base import BaseArm, Params, TurnContext, register
from harness.arms.retrieval import retrieve_one


class LaneParams(Params):
    lane: Literal["hybrid", "dense", "bm25"] = "hybrid"
    depth: int = 100


@register("original")
class Original(BaseArm):
    """The last user turn as it was typed, with the inherited filters."""

    Params = LaneParams

    async def run(self, ctx: TurnContext):
        return [retrieve_one(ctx, ctx.turn.user, ctx.inherited_filters, self.params.lane, self.params.depth)]
