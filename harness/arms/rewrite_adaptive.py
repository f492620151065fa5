"""`rewrite_adaptive(threshold=0.6)`: one rewrite by default; the standalone query and its
variants fused (as `multi_query_rrf`) when the rewrite's confidence is below the threshold."""
from __future__ import annotations

from pydantic import Field

from harness.arms.base import register
from harness.arms.multi_query_rrf import with_variants
from harness.arms.rewrite import RewriteFamily, RewriteParams


class AdaptiveParams(RewriteParams):
    threshold: float = Field(default=0.6, ge=0, le=1)
    n: int = Field(default=3, ge=1)


@register("rewrite_adaptive")
class RewriteAdaptive(RewriteFamily):
    Params = AdaptiveParams

    async def queries(self, ctx, out, outcomes, notes):
        if out.confidence < self.params.threshold:
            notes.append(f"confidence {out.confidence:.2f} < {self.params.threshold}: {self.params.n} fused queries")
            return with_variants(out, self.params.n)
        notes.append(f"confidence {out.confidence:.2f} >= {self.params.threshold}: one query")
        return [out.standalone]
