"""The hyde role: a hypothetical passage that would answer the question, embedded in place of
(or mixed with) the query. Offline: pseudo-relevance feedback, named as such: the best passage
of a first retrieval stands in for the hypothetical document."""
from __future__ import annotations

from pydantic import BaseModel, Field


class HydeOutput(BaseModel):
    passage: str = Field(max_length=1500)


def hyde_offline(index, query: str, filters: list[dict]) -> HydeOutput:
    """Pseudo-relevance feedback: the text of the top dense hit (first chunk) for the query."""
    hits = index.dense([query], 1, [filters])[0]
    if not hits:
        return HydeOutput(passage=query)
    doc = index.docs[hits[0].doc_id]
    return HydeOutput(passage=(f"{doc.title}\n{doc.text}" if doc.title else doc.text)[:1500])
