"""`multi_query_rrf(n=3, k=60)`: the standalone query and the rewrite contract's variants
(identifier, attribute), each through the lanes, fused by reciprocal rank fusion,
de-duplicated by document, pool capped."""
from __future__ import annotations

from pydantic import Field

from harness.arms.base import register
from harness.arms.rewrite import RewriteFamily, RewriteParams


class MultiQueryParams(RewriteParams):
    n: int = Field(default=3, ge=1)


def with_variants(out, n: int) -> list[str]:
    qs = [out.standalone]
    for v in out.variants:
        if v.strip() and v not in qs:
            qs.append(v)
    return qs[:n]


@register("multi_query_rrf")
class MultiQueryRRF(RewriteFamily):
    Params = MultiQueryParams

    async def queries(self, ctx, out, outcomes, notes):
        return with_variants(out, self.params.n)
