"""The dense lane on a Qdrant server or cluster (`index.qdrant_url`), through qdrant-client: a
collection the index builds from its own chunks (`build_collection`), or a user's existing
collection queried as it is (`attach`: their points, vectors and payload names; never rebuilt,
written or deleted). Every problem a user's server or collection can have is an
IndexSetupError naming the `index:` field to change."""
from __future__ import annotations

import os
from typing import Callable

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from harness.corpus.chunk import Chunk
from harness.corpus.dense import Attach, IndexSetupError
from harness.corpus.filters import to_qdrant

COLLECTION = "chunks"  # the collection the index builds on a server
SCROLL = 1024


class QdrantLane:
    def __init__(self, client: QdrantClient, collection: str, points: int, where: str,
                 filter_of: Callable[[list[dict]], qm.Filter | None], ids: list | None = None,
                 using: str | None = None):
        """Point ids are chunk rows, or `ids[row]` (an attached collection's own ids)."""
        self.client, self.collection, self.points, self.where = client, collection, points, where
        self.owns_client = False  # close() closes the client only when the index made it (`connect`)
        self._filter_of, self._using = filter_of, using
        self._row = {pid: r for r, pid in enumerate(ids)} if ids is not None else None

    def search(self, vectors: np.ndarray, filters: list[list[dict]], limit: int) -> list[list[tuple[int, float]]]:
        exact = qm.SearchParams(exact=True)
        reqs = [qm.QueryRequest(query=v.tolist(), using=self._using, filter=self._filter_of(f), limit=limit,
                                params=exact, with_payload=False) for v, f in zip(vectors, filters)]
        row = (lambda pid: pid) if self._row is None else self._row.__getitem__
        return [[(row(p.id), float(p.score)) for p in resp.points]
                for resp in self.client.query_batch_points(self.collection, reqs)]

    def close(self) -> None:
        if self.owns_client:
            self.client.close()


def connect(url: str) -> QdrantClient:
    """A client for the server at `url` (an API key from QDRANT_API_KEY, if set), checked to answer."""
    client = QdrantClient(url=url, api_key=os.environ.get("QDRANT_API_KEY") or None, check_compatibility=False)
    try:
        client.get_collections()
    except Exception as e:  # connection refused, DNS, TLS, 401/403: all mean this URL is not usable
        client.close()
        raise IndexSetupError(f"index.qdrant_url: cannot use the Qdrant server at {url}: {_reason(e)}") from None
    return client


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def build_collection(client: QdrantClient, vecs: np.ndarray, payloads: list[dict], where: str) -> QdrantLane:
    """(Re)create COLLECTION with the chunk vectors (normalised: DOT is cosine, and qdrant-client's
    local mode does not renormalise stored vectors on every search) and their payloads."""
    if client.collection_exists(COLLECTION):
        client.delete_collection(COLLECTION)
    params = qm.VectorParams(size=int(vecs.shape[1]), distance=qm.Distance.DOT)
    client.create_collection(COLLECTION, vectors_config=params)
    client.upload_collection(COLLECTION, vectors=vecs, ids=list(range(len(vecs))), payload=payloads,
                             batch_size=512, wait=True)
    return QdrantLane(client, COLLECTION, len(vecs), f"{where} collection {COLLECTION}", to_qdrant)


def attach(client: QdrantClient, where: str, spec: Attach, docs: dict, dim: int,
           allowed: Callable[[list[dict]], np.ndarray]) -> tuple[QdrantLane, list[Chunk], np.ndarray]:
    """The lane on an existing collection, its points as chunks (doc id from `spec.id_field`,
    text from `spec.text_field`, in the collection's order) and their unit vectors, which score
    as the collection does (a Cosine collection's normalised here, a Dot collection's as stored:
    they must be unit length). Filters become the ids of the points whose documents pass them
    (`allowed`: a filter's mask over the chunks), so they read the eval set's metadata, never
    the collection's payload names."""
    name = f"collection {spec.collection!r} at {where}"
    using, params = _vector(client, spec, name)
    if dim and params.size != dim:
        raise IndexSetupError(f"index.vector: the vectors of {name} have {params.size} dimensions; the query "
                              f"embedder (index.embedder) makes {dim}: queries must be embedded like the collection")
    ids, chunks, vecs = _read_points(client, spec, using, docs, name)
    if params.distance == qm.Distance.COSINE:  # a server stores them normalised; qdrant-client's local mode may not
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    else:
        norms = np.linalg.norm(vecs, axis=1)
        if np.abs(norms - 1).max() > 1e-4:
            raise IndexSetupError(f"index.vector: {name} scores by Dot product over vectors that are not unit length "
                                  f"(point {ids[int(np.abs(norms - 1).argmax())]!r}); the harness ranks by cosine: "
                                  "use a Cosine collection or unit vectors")

    def filter_of(filters: list[dict]) -> qm.Filter | None:
        keep = allowed(filters) if filters else None
        if keep is None or keep.all():
            return None
        return qm.Filter(must=[qm.HasIdCondition(has_id=[ids[r] for r in np.flatnonzero(keep)])])

    return QdrantLane(client, spec.collection, len(ids), name, filter_of, ids=ids, using=using), chunks, vecs


def _vector(client: QdrantClient, spec: Attach, name: str) -> tuple[str | None, qm.VectorParams]:
    """The collection's vector the spec names (None: its unnamed one) and its parameters."""
    from harness.yamlpos import did_you_mean

    if not client.collection_exists(spec.collection):
        have = sorted(c.name for c in client.get_collections().collections)
        raise IndexSetupError(f"index.collection: no {name}{did_you_mean(spec.collection, have)} "
                              f"(collections there: {', '.join(have) or 'none'})")
    vectors = client.get_collection(spec.collection).config.params.vectors
    if isinstance(vectors, qm.VectorParams):
        if spec.vector is not None:
            raise IndexSetupError(f"index.vector: {name} has one unnamed vector, not {spec.vector!r}: "
                                  "leave index.vector out")
        using, params = None, vectors
    elif spec.vector is None or spec.vector not in (vectors or {}):
        named = sorted(vectors or {})
        what = "name one with index.vector" if spec.vector is None else f"no vector {spec.vector!r}"
        raise IndexSetupError(f"index.vector: {name} has named vectors ({', '.join(named) or 'none'}): "
                              f"{what}{did_you_mean(spec.vector, named) if spec.vector else ''}")
    else:
        using, params = spec.vector, vectors[spec.vector]
    if params.multivector_config is not None or params.distance not in (qm.Distance.COSINE, qm.Distance.DOT):
        raise IndexSetupError(f"index.vector: {name}'s vector {using or '(unnamed)'} is scored by "
                              f"{params.distance.value}{' over multivectors' if params.multivector_config else ''}; "
                              "the harness ranks single vectors by cosine (Cosine, or Dot over unit vectors)")
    return using, params


def _field(payload: dict | None, path: str):
    v = payload or {}
    for part in path.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v


def _fields(client: QdrantClient, collection: str, point) -> str:
    payload = client.retrieve(collection, [point], with_payload=True)[0].payload or {}
    return f"its fields: {', '.join(sorted(payload)) or 'none'}"


def _read_points(client: QdrantClient, spec: Attach, using: str | None, docs: dict,
                 name: str) -> tuple[list, list[Chunk], np.ndarray]:
    """Every point of the collection: its id, its chunk and its vector; read-only (scroll)."""
    ids, chunks, vecs, seen, stray = [], [], [], {}, []
    offset = None
    while True:
        records, offset = client.scroll(spec.collection, limit=SCROLL, offset=offset,
                                        with_vectors=[using] if using else True,
                                        with_payload=[spec.id_field, spec.text_field])
        for p in records:
            doc, text = _field(p.payload, spec.id_field), _field(p.payload, spec.text_field)
            if doc is None:
                raise IndexSetupError(f"index.id_field: point {p.id!r} of {name} has no payload field "
                                      f"{spec.id_field!r} ({_fields(client, spec.collection, p.id)})")
            if not isinstance(text, str):
                raise IndexSetupError(f"index.text_field: point {p.id!r} of {name} has no text in payload field "
                                      f"{spec.text_field!r} ({_fields(client, spec.collection, p.id)})")
            vec = p.vector.get(using) if isinstance(p.vector, dict) else p.vector
            if vec is None:
                raise IndexSetupError(f"index.vector: point {p.id!r} of {name} has no vector {using or '(unnamed)'}")
            if str(doc) not in docs:
                stray.append((p.id, doc))
                continue
            n = seen[str(doc)] = seen.get(str(doc), -1) + 1
            ids.append(p.id)
            chunks.append(Chunk(chunk_id=f"{doc}#{n}", doc_id=str(doc), text=text))
            vecs.append(vec)
        if offset is None:
            break
    if stray:
        raise IndexSetupError(f"index.id_field: {len(stray)} point(s) of {name} name documents the eval set does not "
                              f"have in {spec.id_field!r}, e.g. point {stray[0][0]!r}: {stray[0][1]!r}")
    if not ids:
        raise IndexSetupError(f"index.collection: {name} has no points")
    return ids, chunks, np.asarray(vecs, dtype=np.float32)
