from __future__ import annotations

from pydantic import Field

from harness.arms.base import TurnContext, register
from harness.arms.original import LaneParams, SingleQueryArm


class ConcatParams(LaneParams):
    max_turns: int = Field(default=0, ge=0)  # 0: every user turn so far


@register("concat")
class Concat(SingleQueryArm):
    """The standard history baseline: the user turns so far, newest first, joined."""

    Params = ConcatParams

    def query(self, ctx: TurnContext):
        users = [ctx.turn.user] + [t.user for t in reversed(ctx.history)]
        if self.params.max_turns:
            users = users[: self.params.max_turns]
        return " ".join(users), ctx.inherited_filters
