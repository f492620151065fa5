"""The eval sets written here can tell arms apart (issue: handbook-de traps, b2b-shop follow-ups).
Real pipeline: shipped embedding cache, embedded Qdrant, BM25, ranx."""
import json

import pandas as pd
import pytest

from harness.config import load_config
from harness.metrics.compute import compute_metrics, load_labels
from harness.run.replay import Replay
from harness.run.traces import read_traces
from tests.conftest import ROOT


def replay(config: str, tmp_path):
    cfg, raw = load_config(ROOT / config)
    raw = {**raw, "eval_set": str(ROOT / cfg.eval_set), "runs_dir": str(tmp_path)}
    cfg = cfg.model_copy(update={"eval_set": raw["eval_set"], "runs_dir": str(tmp_path)})
    from harness.corpus.embed import EmbeddingCache, make_embedder
    from harness.corpus.index import Index

    rp = Replay(cfg, raw, run_dir=tmp_path / "run", progress=False)
    cache = EmbeddingCache(ROOT / cfg.eval_set / "embeddings", write_to=tmp_path / "emb")  # never add to the shipped cache
    index = Index(rp.es.docs, make_embedder(cfg.index.embedder), cache, max_chars=cfg.index.max_chars)
    run = rp.run(index=index)
    assert index.cache.misses == 0, "the shipped cache covers every query of the demo configs"
    res = compute_metrics(run)
    pt = res.per_turn.merge(load_labels(run), on=["session_id", "turn_index"])
    return run, pt


def mean(pt, arm_prefix, metric, **where):
    sel = pt[(pt["arm_id"].str.startswith(arm_prefix + "(")) & (pt["metric"] == metric)]
    for k, v in where.items():
        sel = sel[v(sel[k])] if callable(v) else sel[sel[k] == v]
    vals = sel["value"].dropna()
    assert len(vals) > 0, (arm_prefix, metric, where)
    return vals.mean()


@pytest.fixture(scope="module")
def handbook(tmp_path_factory):
    return replay("configs/handbook.yaml", tmp_path_factory.mktemp("hb"))


@pytest.fixture(scope="module")
def b2b(tmp_path_factory):
    return replay("configs/b2b.yaml", tmp_path_factory.mktemp("b2b"))


def test_handbook_misleading_questions_fall_into_their_traps(handbook):
    run, pt = handbook
    direct = mean(pt, "original", "mrr@10", query_type="direct")
    misleading = mean(pt, "original", "mrr@10", query_type="misleading")
    assert misleading < direct
    labels = load_labels(run).set_index(["session_id", "turn_index"])
    t = read_traces(run).to_pandas()
    t = t[t["arm"] == "original"]
    mis = labels[labels["query_type"] == "misleading"]
    first = {(r.session_id, r.turn_index): (list(r.ranking) or [None])[0] for r in t.itertuples()}
    trapped = sum(1 for key, row in mis.iterrows() if first[key] == row["surface_doc"])
    assert trapped >= len(mis) / 2, f"surface section first for only {trapped} of {len(mis)}"


def test_handbook_unanswerable_have_no_relevant_section(handbook):
    run, _ = handbook
    labels = load_labels(run)
    un = labels[labels["query_type"] == "unanswerable"]
    assert len(un) >= 10
    assert all(json.loads(q) == {} for q in un["qrels"])
    assert set(un["answerability"]) == {"UNANSWERABLE"}


@pytest.mark.parametrize("split", ["main", "test"])
def test_b2b_oracle_beats_original_on_follow_ups(b2b, split):
    _, pt = b2b
    where = dict(split=split, turn_index=lambda s: s >= 2)
    assert mean(pt, "oracle", "recall@10", **where) > mean(pt, "original", "recall@10", **where) + 0.3


@pytest.mark.parametrize("split", ["main", "test"])
def test_b2b_concat_beats_original_on_follow_ups(b2b, split):
    # Both search the same lanes, the identifier lane included (without it concat loses the
    # main split's mid-session identifier turns to the noise of the history). Both keep the
    # inherited ("sticky") filters, which bound them on changed-constraint and topic-switch turns.
    _, pt = b2b
    where = dict(split=split, turn_index=lambda s: s >= 2)
    assert mean(pt, "concat", "recall@10", **where) > mean(pt, "original", "recall@10", **where)


def test_b2b_offline_rewrite_beats_original_on_held_out_follow_ups(b2b):
    """The offline rules were written against the main split only."""
    _, pt = b2b
    where = dict(split="test", turn_index=lambda s: s >= 2)
    assert mean(pt, "rewrite", "recall@10", **where) > mean(pt, "original", "recall@10", **where) + 0.2
