"""BM25 for many queries at once (harness/corpus/bm25_many.py) equals one query at a time, to the
last bit: the scores row by row against bm25s, the ranked hits against `Index._lexical` (one
chunk per document or many, filters, ties, repeated and unknown tokens, k below and above the
matches), and a run's memo gives every arm the same hits and counts the same work either way."""
from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace

import numpy as np
import pytest

from harness.corpus import bm25_many
from harness.corpus.embed import EmbeddingCache
from harness.corpus.index import Index, _filter_key
from harness.corpus.memo import Memo
from harness.corpus.tokenize import tokenize
from harness.evalset.load import load_eval_set

WORDS = ["bolt", "hex", "steel", "zinc", "nut", "washer", "m8", "m10", "thread", "coarse", "fine", "brass"]


class Hash16:
    name, dim = "test-hash-16", 16

    def _vec(self, texts):
        out = np.array([np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], np.uint8) for t in texts], np.float32)
        return out - 127.5

    embed_queries = embed_documents = _vec


def _index(tmp_path, one_chunk: bool) -> Index:
    from tests.conftest import write_set

    rng = random.Random(3)
    docs = []
    for i in range(60):
        n = rng.randint(3, 9) if one_chunk else rng.randint(20, 70)
        text = " ".join(rng.choice(WORDS) for _ in range(n))
        docs.append({"doc_id": f"d{i + 1}", "title": "", "text": text,
                     "metadata": {"material": rng.choice(["brass", "steel"]), "assortment": rng.choice([["A"], ["B"], ["A", "B"]]),
                                  "price": i}})
    docs += [dict(d, doc_id=d["doc_id"] + "t") for d in docs[:8]]  # the same text again: ties at every score
    root = write_set(tmp_path / "set", docs=docs)
    return Index(load_eval_set(root).docs, Hash16(), EmbeddingCache(tmp_path / "emb"), max_chars=10_000 if one_chunk else 60)


def _queries(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS + ["unknownword", "the"]) for _ in range(rng.randint(0, 6))) for _ in range(n)]


@pytest.fixture(scope="module", params=[True, False], ids=["one-chunk", "many-chunks"])
def index(request, tmp_path_factory):
    idx = _index(tmp_path_factory.mktemp("bm25many"), request.param)
    assert idx._chunk_per_doc is request.param
    return idx


def test_scores_row_by_row_equal_bm25s_to_the_bit(index):
    qs = _queries(200) + ["bolt bolt bolt", "m8 m8 hex m8", ""]
    ids = [bm25_many.token_ids(index.bm25, tokenize(q)) for q in qs]
    many = bm25_many.scores_many(index.bm25, ids)
    for q, row in zip(qs, many):
        toks = tokenize(q)
        one = index.bm25.get_scores(toks) if toks else np.zeros_like(row)
        assert row.dtype == one.dtype and row.tobytes() == one.tobytes(), q


FILTERS = [[], [{"field": "material", "op": "eq", "value": "brass"}], [{"field": "assortment", "op": "in", "value": ["B"]}]]


@pytest.mark.parametrize("k", [1, 3, 50, 500])
def test_the_hits_of_a_batch_equal_each_query_searched_alone(index, k):
    index.memo = memo = Memo()
    try:
        qs = _queries(80, seed=k)
        for i, q in enumerate(qs):
            bm25_many.announce(index, [q], k, FILTERS[i % 3])
        bm25_many.search_ahead(index)
        assert memo.expected == [] and memo.ahead
        for i, q in enumerate(qs):
            f = FILTERS[i % 3]
            got = memo.ahead.get(("bm25", q, _filter_key(f), k))
            assert got is not None, q
            alone = index._lexical(q, k, f)
            assert got[0].doc_ids == alone.doc_ids and got[0].scores == alone.scores and got[0].lane == "bm25", (q, f)
        if k < 50:  # some queries fill k: the ties at the k-th place decided as alone
            assert any(len(h.doc_ids) == k for h, _ in memo.ahead.values())
    finally:
        index.memo = None


def test_a_run_memo_gives_every_arm_the_same_hits_and_counts_the_same_work(index):
    qs = _queries(40, seed=9)
    alone = [index._lexical(q, 50, FILTERS[i % 2]) for i, q in enumerate(qs)]
    counts = []
    for announce in (False, True):
        index.memo = memo = Memo()
        try:
            for arm in range(2):  # a second arm asks for the same searches: reused
                if announce:
                    for i, q in enumerate(qs):
                        bm25_many.announce(index, [q], 50, FILTERS[i % 2])
                    bm25_many.search_ahead(index)  # as a search does before it starts its clock
                got = [index.lexical([q], 50, [FILTERS[i % 2]])[0] for i, q in enumerate(qs)]
                assert [(h.doc_ids, h.scores) for h in got] == [(h.doc_ids, h.scores) for h in alone]
                # reused, or done ahead in the batch: counted as work done earlier, in its milliseconds
                seen = [(q, i % 2) in {(p, j % 2) for j, p in enumerate(qs[:i])} for i, q in enumerate(qs)]
                assert [h.shared for h in got] == [arm == 1 or s or announce for s in seen]
            counts.append((memo.hits, memo.misses))
            assert memo.ahead == {} and memo.expected == []
        finally:
            index.memo = None
    distinct = len({(q, i % 2) for i, q in enumerate(qs)})
    assert counts[0] == counts[1] == (2 * len(qs) - distinct, distinct)


def test_a_query_with_a_token_outside_the_matrix_is_left_to_its_own_search():
    bm = SimpleNamespace(vocab_dict={"a": 0, "b": 1, "": 2}, scores={"indptr": np.array([0, 1, 2]), "indices": np.array([0, 0]),
                                                                       "data": np.array([1.0, 2.0], np.float32), "num_docs": 1})
    assert bm25_many.token_ids(bm, ["a", "x", "b"]) == [0, 1]
    assert bm25_many.token_ids(bm, ["a", ""]) is None


def test_columns_naming_a_chunk_twice_are_found(index):
    assert bm25_many.columns_distinct(index.bm25)
    twice = SimpleNamespace(scores={"indptr": np.array([0, 2, 3]), "indices": np.array([1, 1, 0]), "num_docs": 2})
    unsorted = SimpleNamespace(scores={"indptr": np.array([0, 2, 3]), "indices": np.array([1, 0, 0]), "num_docs": 2})
    assert not bm25_many.columns_distinct(twice) and bm25_many.columns_distinct(unsorted)


def test_the_one_key_order_is_the_three_key_sort():
    rng = np.random.default_rng(5)
    for n_queries, n_docs, n in [(1, 1, 1), (32, 2000, 7000), (3, 5, 40), (64, 1 << 20, 3000), (2, 1 << 40, 50)]:
        q = np.sort(rng.integers(0, n_queries, n)).astype(np.int64)
        docs = rng.integers(0, n_docs, n).astype(np.int64)
        best = rng.choice(np.array([0.5, 1.25, 3.0, 1e-30, 7.5e3], np.float32), n).astype(np.float64)  # ties on purpose
        want = np.lexsort((-docs, -best, q))
        got = bm25_many._order(q, best, docs, n_queries, n_docs)
        assert np.array_equal(q[got], q[want]) and np.array_equal(best[got], best[want]) and np.array_equal(docs[got], docs[want])


def test_a_query_that_cannot_be_prepared_is_left_to_its_own_search_and_the_others_are_done(index):
    bad = [{"field": "price", "op": "gte", "value": "10"}]  # a number compared with a string: TypeError
    index.memo = memo = Memo()
    try:
        bm25_many.announce(index, ["bolt hex"], 50, bad)
        bm25_many.announce(index, ["steel nut", "brass"], 50, [])
        bm25_many.search_ahead(index)
        assert set(memo.ahead) == {("bm25", "steel nut", "", 50), ("bm25", "brass", "", 50)}
        with pytest.raises(TypeError):  # the error meets its own search only
            index.lexical(["bolt hex"], 50, [bad])
        assert index.lexical(["brass"], 50, [[]])[0].doc_ids == index._lexical("brass", 50, []).doc_ids
    finally:
        index.memo = None


def test_an_index_whose_scores_this_module_would_not_reproduce_is_searched_one_query_at_a_time(index, monkeypatch):
    for attr, value in [("dtype", "float64"), ("nonoccurrence_array", np.ones(3, np.float32))]:
        monkeypatch.setattr(index.bm25, attr, value, raising=False)
        assert not bm25_many.batchable(index.bm25)
        monkeypatch.undo()
    assert bm25_many.batchable(index.bm25)
    index.memo = memo = Memo()
    try:
        monkeypatch.setattr(index, "_batchable", None)
        monkeypatch.setattr(bm25_many, "batchable", lambda bm25: False)
        bm25_many.announce(index, ["steel nut"], 50, [])
        bm25_many.search_ahead(index)
        assert memo.ahead == {} and memo.expected == [] and index._batchable is False
        bm25_many.announce(index, ["steel nut"], 50, [])  # known now: nothing announced
        assert memo.expected == []
    finally:
        index.memo = None
