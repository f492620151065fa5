"""The embedded engine: Qdrant Edge (qdrant-edge-py), Qdrant's own engine in this process. One
shard in a temporary folder, removed when the index is closed (or collected, or at exit; a
killed process's folder by the next process that makes one there). Its
segments stay plain (the shard is never optimised, so no HNSW graph is built) and every search
asks for exact search: an evaluation never depends on an approximate index, whose results
change with its build order. Filters are Edge's own (`filters.to_edge`)."""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import numpy as np

from harness.corpus.filters import edge_payload, to_edge

BATCH = 512  # points per upsert
PREFIX = "harness-edge-"  # harness-edge-<pid>-<random>: a shard's folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _remove_stale(parent: str) -> None:
    """Shard folders left by processes that were killed (no clean-up ran) and are gone."""
    for name in os.listdir(parent):
        pid = name.split("-")[2] if name.startswith(PREFIX) and name.count("-") >= 3 else ""
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _remove(shard, folder: str) -> None:
    try:
        shard.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def field_indexes(payloads: list[dict]) -> list[tuple[str, str]]:
    """(field, Keyword or Float) for every metadata field whose values (list items counted
    one by one, nulls left out) are all strings or all numbers: Qdrant's payload indexes, which a
    filtered search reads instead of every point's stored payload. A field
    of mixed kinds gets none, nor does a name Edge cannot read as a JSON path: their conditions read
    the payload, as every condition did before. (Every such field is indexed, those no filter
    names too: an eval set's metadata is small.)"""
    kinds: dict[str, set] = {}
    for p in payloads:
        for name, v in p["meta"].items():
            seen = kinds.setdefault(name, set())
            for x in v if isinstance(v, list) else [v]:
                if x is not None:
                    seen.add("Keyword" if isinstance(x, str) else "Float" if isinstance(x, (int, float)) else "other")
    return [(name, seen.pop()) for name, seen in kinds.items() if len(seen) == 1 and seen != {"other"}]


class EdgeLane:
    where = "qdrant-edge (embedded, exact search)"

    def __init__(self, vecs: np.ndarray, payloads: list[dict], folder: str | None = None, index_fields: bool = True):
        """Point i is chunk row i: its vector `vecs[i]` (normalised, so Dot is cosine) and
        `payloads[i]["meta"]`, the document's metadata the filters read. `folder`: where the
        shard's temporary folder goes (default: the system's temporary folder). `index_fields`:
        a payload index on every metadata field of one kind (`field_indexes`)."""
        import qdrant_edge as edge

        self._edge = edge
        parent = folder or tempfile.gettempdir()
        _remove_stale(parent)
        self.folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent)
        try:
            config = edge.EdgeConfig(vectors=edge.EdgeVectorParams(size=int(vecs.shape[1]), distance=edge.Distance.Dot),
                                     wal_enabled=False, max_search_threads=1)
            self._shard = edge.EdgeShard.create(os.path.join(self.folder, "shard"), config)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self._close = weakref.finalize(self, _remove, self._shard, self.folder)
        metas = [edge_payload(p["meta"]) for p in payloads]
        for i in range(0, len(vecs), BATCH):
            rows = range(i, min(i + BATCH, len(vecs)))
            self._shard.update(edge.UpdateOperation.upsert_points([edge.Point(r, vecs[r].tolist(), metas[r]) for r in rows]))
        for name, kind in field_indexes(metas) if index_fields else []:
            try:
                self._shard.update(edge.UpdateOperation.create_field_index(f"meta.{name}",
                                                                          getattr(edge.PayloadSchemaType, kind)))
            except ValueError:  # a name Edge reads as no JSON path ("a b", ""): its conditions read the payload
                pass
        self.points = len(vecs)
        self._exact = edge.SearchParams(exact=True)

    def search(self, vectors: np.ndarray, filters: list[list[dict]], limit: int) -> list[list[tuple[int, float]]]:
        e = self._edge
        reqs = [e.QueryRequest(limit=limit, query=e.Query.Nearest(v.tolist()), filter=to_edge(f), params=self._exact,
                               with_payload=False, with_vector=False) for v, f in zip(vectors, filters)]
        found = self._shard.query_batch(e.QueryBatchRequest(reqs))
        return [[(int(p.id), float(p.score)) for p in points] for points in found]

    def indexed(self) -> int:
        """Vectors in an HNSW index (0: every segment is plain)."""
        return self._shard.info().indexed_vectors_count

    def close(self) -> None:
        self._close()
