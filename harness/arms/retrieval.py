"""Shared helper of the arms: search one query on the configured lane with filters and turn
the hits into an ArmResult."""
from __future__ import annotations

import time

from harness.arms.base import ArmResult, TurnContext


def retrieve_one(ctx: TurnContext, query: str, filters: list[dict], lane: str, depth: int) -> ArmResult:
    t0 = time.perf_counter()
    applied = ctx.entitlement_filters + filters
    fused, lane_hits = ctx.index.search([query], depth, lane=lane, filters=[applied])[0]
    ms = (time.perf_counter() - t0) * 1000
    cands = [h.as_dict() for h in (lane_hits if lane == "hybrid" else fused)]
    if lane == "hybrid":
        cands += [h.as_dict() for h in fused]
    return ArmResult(issued_queries=[query], lanes=[lane], applied_filters=applied, candidates=cands,
                     ranking=[h.doc_id for h in fused], ms={"retrieve": ms})
