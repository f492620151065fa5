from __future__ import annotations

from harness.arms.base import BaseArm, TurnContext, register
from harness.arms.original import LaneParams
from harness.arms.retrieval import retrieve_one


class ConcatParams(LaneParams):
    max_turns: int = 0  # 0: every user turn so far


@register("concat")
class Concat(BaseArm):
    """The standard history baseline: the user turns so far, newest first, joined."""

    Params = ConcatParams

    async def run(self, ctx: TurnContext):
        users = [ctx.turn.user] + [t.user for t in reversed(ctx.history)]
        if self.params.max_turns:
            users = users[: self.params.max_turns]
        return [retrieve_one(ctx, " ".join(users), ctx.inherited_filters, self.params.lane, self.params.depth)]
