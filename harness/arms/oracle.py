from __future__ import annotations

from harness.arms.capability import Capability
from harness.arms.base import TurnContext, register
from harness.arms.original import SingleQueryArm


@register("oracle")
class Oracle(SingleQueryArm):
    """The reference rewrite with the expected filters: an upper bound for rewriting. Turns
    without a reference rewrite are n/a (recorded, never hidden)."""

    not_applicable = "no reference rewrite"
    base_capabilities = SingleQueryArm.base_capabilities | {Capability.ORACLE}
    reads_labels = frozenset({"reference_rewrite", "expected_filters"})

    def query(self, ctx: TurnContext):
        lab = ctx.turn.labels
        if lab is None or not lab.reference_rewrite:
            return None
        return lab.reference_rewrite, [f.model_dump() for f in lab.expected_filters]
