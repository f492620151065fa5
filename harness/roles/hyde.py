"""The hyde role: a hypothetical passage that would answer the question, embedded in place of
(or mixed with) the query. Offline, named as such: vector pseudo-relevance feedback (Rocchio
over the top hits; Li et al., "Pseudo Relevance Feedback with Deep Language Models and Dense
Retrievers: Successes and Pitfalls", TOIS 2023, as in Pyserini's dense PRF): the mean of the
top `PRF_DEPTH` dense hits' vectors stands in for the hypothetical document's, and the arm
mixes it with the query vector at `hyde_weight` (Rocchio's beta; 1 - hyde_weight is alpha)."""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr

from harness.llm.schema import bound

PRF_DEPTH = 3
ASK_PASSAGE = 400  # what a model is asked to write: a short passage (the strict schema's bound)


class HydeOutput(BaseModel):
    passage: str = Field(max_length=1500, json_schema_extra=bound(ASK_PASSAGE))
    _vector: np.ndarray | None = PrivateAttr(default=None)  # offline: the feedback vector itself

    @property
    def vector(self) -> np.ndarray | None:
        return self._vector


def hyde_offline(index, query: str, filters: list[dict], depth: int = PRF_DEPTH) -> HydeOutput:
    """Rocchio over the top `depth` dense hits: their best chunks' mean vector, normalised; the
    passage names the hits it came from (for the trace). No hit: the query stands alone."""
    hits = index.dense([query], depth, [filters])[0]
    if not hits:
        return HydeOutput(passage=query)
    ids = [h.doc_id for h in hits]
    vecs = index.best_chunk_vectors(index.query_vector(query), ids)
    out = HydeOutput(passage=f"vector feedback: mean of the top {len(ids)} dense hits ({', '.join(ids)})"[:1500])
    mean = vecs.mean(axis=0)
    out._vector = mean / (np.linalg.norm(mean) or 1.0)
    return out
