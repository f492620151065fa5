"""The index's lexical statistics kept on disk (harness/corpus/lexical.py): loaded, they are what
a build makes (the same chunks, BM25 arrays, vocabulary, identifier lane and scores) on the
shipped sets; their key changes with anything they are computed from; a damaged entry is built
again."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from harness.corpus import lexical
from harness.corpus.tokenize import tokenize
from harness.evalset.load import load_eval_set
from tests.conftest import ROOT

SETS = ["mtrag-un", "b2b-shop", "handbook-de"]


def same_bm25(a, b) -> bool:
    return (a.vocab_dict == b.vocab_dict and a.scores["num_docs"] == b.scores["num_docs"]
            and all(np.array_equal(a.scores[k], b.scores[k]) and a.scores[k].dtype == b.scores[k].dtype
                    for k in ("data", "indices", "indptr")))


@pytest.mark.parametrize("name", SETS)
def test_loaded_statistics_are_what_a_build_makes(name, tmp_path, monkeypatch):
    es = load_eval_set(ROOT / "eval_sets" / name)
    built = lexical.build(es.docs, 2000)
    first = lexical.statistics(es.docs, 2000, tmp_path)  # built and written
    monkeypatch.setattr(lexical, "build", lambda *a: pytest.fail("built again: the entry was not loaded"))
    loaded = lexical.statistics(es.docs, 2000, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [lexical.key(es.docs, 2000)]  # one entry, no temporary left
    for got in (first, loaded):
        assert got.chunks == built.chunks and got.id_docs == built.id_docs
        assert same_bm25(got.bm25, built.bm25)
        assert (got.identifiers is None) == (built.identifiers is None)
        assert got.identifiers is None or same_bm25(got.identifiers, built.identifiers)
    queries = [q for q in (tokenize(t.user) for s in es.sessions[:40] for t in s.turns) if q][:200]
    for q in queries:
        assert np.array_equal(loaded.bm25.get_scores(q), built.bm25.get_scores(q))


def test_the_key_changes_with_what_the_statistics_are_computed_from():
    es = load_eval_set(ROOT / "eval_sets/b2b-shop")
    base = lexical.key(es.docs, 2000)
    assert lexical.key(es.docs, 2000) == base and lexical.key(es.docs, 1000) != base
    first = next(iter(es.docs))
    for field, value in (("text", "changed"), ("title", "changed"), ("metadata", {"x": 1})):
        docs = dict(es.docs)
        docs[first] = copy.copy(docs[first])
        object.__setattr__(docs[first], field, value)
        assert lexical.key(docs, 2000) != base, field
    assert lexical.key(dict(reversed(list(es.docs.items()))), 2000) != base  # the order of the chunks


def test_a_damaged_entry_is_built_again(tmp_path, capsys):
    es = load_eval_set(ROOT / "eval_sets/b2b-shop")
    lexical.statistics(es.docs, 2000, tmp_path)
    entry = tmp_path / lexical.key(es.docs, 2000)
    (entry / "chunks.json").write_text("{not json", encoding="utf-8")
    got = lexical.statistics(es.docs, 2000, tmp_path)
    assert got.chunks == lexical.build(es.docs, 2000).chunks
    assert "unreadable" in capsys.readouterr().err
    assert lexical._load(entry).chunks == got.chunks  # written anew
