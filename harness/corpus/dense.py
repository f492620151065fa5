"""The dense lane's engine behind one small interface, chosen in one place (harness.corpus.index's
`open_lane`): Qdrant
Edge in this process by default (dense_edge.py), a Qdrant server or cluster through
qdrant-client when `index.qdrant_url` is set (dense_qdrant.py), there either a collection the
index builds or a user's existing collection it attaches to.

An engine only selects candidates. Their scores are computed here, in float64 from the index's
own vectors (`exact_top`), so a ranking does not depend on an engine's float32 arithmetic (Edge
and a server score in float32, 1e-7 from the float64 cosine: enough to swap near-ties in about
1% of the shipped sets' queries). Edge, a server and qdrant-client's local mode rank alike, and
as the index did on qdrant-client's local mode, to the last bit of every score."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from harness.errors import BadInput


class IndexSetupError(BadInput, ValueError):
    """A problem with the `index:` section found while the index is built (a server that cannot
    be reached, a collection without the named vector or payload field). The message starts
    with the field: `index.<field>: ...`."""


class DenseLane(Protocol):
    where: str  # the engine and where its points are, for people to read
    points: int  # how many points it searches

    def search(self, vectors: np.ndarray, filters: list[list[dict]], limit: int) -> list[list[tuple[int, float]]]:
        """Per query (normalised float32 vectors, one filter each): up to `limit` (chunk row,
        engine score) pairs passing the filter, best first, found by exact search."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Attach:
    """An existing collection on a Qdrant server, queried as it is (never rebuilt nor changed)."""
    collection: str
    vector: str | None = None  # its named vector; None: its unnamed one
    id_field: str = "doc_id"  # payload field with the eval set's document id
    text_field: str = "text"  # payload field with the passage text


def float32_error(dim: int) -> float:
    """A bound on |engine score - exact score| for unit vectors of `dim` components: a float32
    dot product errs by at most dim * 2^-24 (any summation order), with 10% and 1e-6 to spare
    for an engine's own normalisation of stored vectors."""
    return 1.1 * dim * 2.0 ** -24 + 1e-6


def exact_top(lane: DenseLane, matrix: np.ndarray, vecs: np.ndarray, filters: list[list[dict]],
              limit: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, the `limit` chunk rows with the highest cosine among those its filter passes,
    best first (ties: lower row first), and their scores.

    The engine selects; the scores are computed here as qdrant-client's local mode computed them
    (the index's engine until issue 28): numpy's product of the float64 query with all the
    chunk vectors (`matrix`: the index's normalised float32 vectors as float64), one product
    per query. So every score, tie and ranking is bit for bit what it was; scoring only the
    candidates would differ in the last bit on some rows (BLAS blocks rows differently).

    An engine's float32 scores are within `float32_error` of these, so it is asked for
    candidates until the last one it returns is provably below the `limit` best (two errors
    below its own limit-th score) or it has no more: the exact top `limit`, whatever the
    engine's rounding. A query without a filter that would ask for every point takes them all
    as its candidates without asking (the engine would return each of them but those scoring NaN)."""
    margin = 2 * float32_error(matrix.shape[1])
    out: list = [None] * len(vecs)
    q64 = vecs.astype(np.float64)
    todo, ask = list(range(len(vecs))), limit + max(16, limit // 8)
    if ask >= lane.points == len(matrix):  # the engine would return every point: they are the candidates
        whole = np.arange(len(matrix))
        for i in [i for i in todo if not filters[i]]:
            out[i] = _rescore(matrix, q64[i], whole, limit, finite=True)
        todo = [i for i in todo if filters[i]]
    while todo:
        again = []
        for i, found in zip(todo, lane.search(vecs[todo], [filters[i] for i in todo], ask)):
            if len(found) >= ask and ask < lane.points and found[-1][1] >= found[limit - 1][1] - margin:
                again.append(i)
            else:
                out[i] = _rescore(matrix, q64[i], [r for r, _ in found], limit)
        todo, ask = again, ask * 2
    return out


def _rescore(matrix: np.ndarray, q: np.ndarray, rows, limit: int, finite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The `limit` best of `rows` by float64 score, ties by row; `finite`: rows not from the
    engine, so those scoring NaN (a NaN in a vector) are left out, as the engine leaves them out."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    rows_ = np.sort(np.asarray(rows, dtype=np.int64))  # the engine's order of ties does not matter
    scores = np.dot(matrix, q)[rows_]
    if finite:
        scored = ~np.isnan(scores)
        rows_, scores = rows_[scored], scores[scored]
    top = np.lexsort((rows_, -scores))[:limit]
    return rows_[top], scores[top]
