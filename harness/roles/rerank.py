"""The rerank role: reorder the capped candidate pool. Offline: keeps the fused order and says so."""
from __future__ import annotations

from pydantic import BaseModel, Field

from harness.llm.schema import bound

OFFLINE_NOTE = "offline rerank keeps the fused order"
ASK_DOCS, ASK_ID = 10, 40  # what a model is asked to write: the pool's first ids (the strict schema's bounds)


class RerankOutput(BaseModel):
    doc_ids: list[str] = Field(json_schema_extra=bound(max_items=ASK_DOCS, item_max_length=ASK_ID))


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
