"""What a lane returns: `Hits`, a ranking held column-wise (doc ids and scores, best first),
whose items are `Hit`s made when asked for."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Hit:
    doc_id: str
    score: float
    rank: int
    lane: str

    def as_dict(self, lane: str | None = None) -> dict:
        """The hit as a trace candidate entry; `lane` names it otherwise (a retrieval lane per query)."""
        return {"doc_id": self.doc_id, "score": float(self.score), "rank": self.rank, "lane": lane or self.lane}


class Hits(Sequence):
    """A lane's ranking, column-wise: doc ids and scores, best first (hit i has rank i + 1).
    Items are `Hit`s, made when asked for; the pipeline reads the columns."""

    __slots__ = ("doc_ids", "scores", "lane", "ms", "shared")

    def __init__(self, doc_ids: list[str], scores: list[float], lane: str, ms: float = 0.0, shared: bool = False):
        self.doc_ids, self.scores, self.lane = doc_ids, scores, lane  # never changed once made (a run's memo shares them)
        self.ms, self.shared = ms, shared  # shared: computed earlier in the run (harness/corpus/memo.py), in `ms`

    def __len__(self) -> int:
        return len(self.doc_ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Hits(self.doc_ids[i], self.scores[i], self.lane) if i.step in (None, 1) and i.start in (None, 0) \
                else list(self)[i]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return Hit(self.doc_ids[i], self.scores[i], i + 1, self.lane)

    def __add__(self, other) -> list[Hit]:
        return list(self) + list(other)

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __repr__(self) -> str:
        return f"Hits({self.lane}: {list(zip(self.doc_ids, self.scores))!r})"


def reused(hits: Hits, ms: float) -> Hits:
    """The hits a run's memo kept, marked as computed earlier (in `ms`)."""
    return Hits(hits.doc_ids, hits.scores, hits.lane, ms, shared=True)
