"""The rerank role: reorder the capped candidate pool. Offline: keeps the fused order and says so."""
from __future__ import annotations

from pydantic import BaseModel

OFFLINE_NOTE = "offline rerank keeps the fused order"


class RerankOutput(BaseModel):
    doc_ids: list[str]


def rerank_offline(doc_ids: list[str]) -> RerankOutput:
    return RerankOutput(doc_ids=list(doc_ids))


def apply_rerank(pool: list[str], proposed: list[str]) -> list[str]:
    """The model's order for the documents it names (unknown ids ignored), the rest after in
    pool order: a reranker can reorder the pool, never add to it or lose from it."""
    seen, out = set(pool), []
    for d in proposed:
        if d in seen and d not in out:
            out.append(d)
    return out + [d for d in pool if d not in out]
