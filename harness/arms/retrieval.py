"""One query on the configured lane with filters, as an ArmResult (the single-query arms)."""
from __future__ import annotations

from harness.arms.base import ArmResult, TurnContext


async def retrieve_one(ctx: TurnContext, query: str, filters: list[dict], lane: str, depth: int,
                       id_lane: bool = False) -> ArmResult:
    from harness.arms.pipeline import search_async

    return await search_async(ctx, [query], filters, lane=lane, depth=depth, pool=max(depth, 100), id_lane=id_lane)
