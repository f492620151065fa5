"""IR metrics against hand-computed values: graded nDCG with linear gains, MRR, recall, ties
ordered by score then doc id descending, unmeasured turns. Each value comes from the harness's
kernel and is checked against ranx (tests/oracle_metrics.py) on the way."""
import json
import math

import pandas as pd
import pytest

from harness.corpus.fusion import order, rrf
from harness.metrics.families.ir import score_rankings
from harness.metrics.segments import parse_segment
from tests import oracle_metrics


def labels(rows):
    return pd.DataFrame([{"session_id": s, "turn_index": t, "qrels": json.dumps(q), "qrels_measured": m}
                         for s, t, q, m in rows])


def final(rows):
    return pd.DataFrame([{"arm_id": "a", "repeat": 0, "session_id": s, "turn_index": t, "ranking": r,
                          "not_applicable": None, "error": None} for s, t, r in rows])


def per_turn_ir(fin, lab, names):
    """The kernel's per-turn values, after checking them against ranx's."""
    ours = score_rankings(lab, [{"session_id": r.session_id, "turn_index": r.turn_index, "ranking": r.ranking}
                                for r in fin.itertuples()], names)
    ours = ours.assign(session_id=ours["session_id"].astype(object), metric=ours["metric"].astype(object))
    ref = oracle_metrics.per_turn_ir(fin, lab, names)
    key = ["session_id", "metric"]
    a, b = ours.sort_values(key).reset_index(drop=True), ref.sort_values(key).reset_index(drop=True)
    assert a["value"].fillna(-1).tolist() == b["value"].fillna(-1).tolist()
    assert a["unmeasured"].fillna("").tolist() == b["unmeasured"].fillna("").tolist()
    return ours


def values(df):
    return {(r.session_id, r.metric): r.value for r in df.itertuples()}


def test_graded_ndcg_mrr_recall_by_hand():
    lab = labels([("q1", 1, {"a": 2, "b": 1, "z": 0}, True)])
    fin = final([("q1", 1, ["x", "b", "a", "y"])])
    v = values(per_turn_ir(fin, lab, ["recall@1", "recall@3", "ndcg@10", "mrr@10"]))
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert v[("q1", "ndcg@10")] == pytest.approx(dcg / idcg)
    assert v[("q1", "mrr@10")] == pytest.approx(0.5)
    assert v[("q1", "recall@1")] == 0.0
    assert v[("q1", "recall@3")] == 1.0


def test_grade_zero_is_not_relevant_and_empty_ranking_scores_zero():
    lab = labels([("q1", 1, {"a": 0, "b": 1}, True), ("q2", 1, {"c": 1}, True)])
    fin = final([("q1", 1, ["a", "b"]), ("q2", 1, [])])
    v = values(per_turn_ir(fin, lab, ["mrr@10"]))
    assert v[("q1", "mrr@10")] == pytest.approx(0.5)
    assert v[("q2", "mrr@10")] == 0.0


def test_unmeasured_turns_are_nan_with_a_reason_not_zero():
    lab = labels([("q1", 1, {}, False), ("q2", 1, {}, True), ("q3", 1, {"a": 1}, True)])
    fin = final([("q1", 1, ["a"]), ("q2", 1, ["a"]), ("q3", 1, ["a"])])
    df = per_turn_ir(fin, lab, ["recall@5"]).set_index("session_id")
    assert math.isnan(df.loc["q1", "value"]) and df.loc["q1", "unmeasured"] == "no relevance labels"
    assert math.isnan(df.loc["q2", "value"]) and df.loc["q2", "unmeasured"] == "no relevant document"
    assert df.loc["q3", "value"] == 1.0


def test_ties_ordered_by_score_then_doc_id_descending():
    assert [d for d, _ in order({"a": 1.0, "c": 1.0, "b": 2.0, "d": 0.5})] == ["b", "c", "a", "d"]
    # a tie between a relevant and an irrelevant document: trec_eval puts doc id "b" before "a"
    lab = labels([("q1", 1, {"a": 1}, True)])
    fin = final([("q1", 1, [d for d, _ in order({"a": 1.0, "b": 1.0})])])
    assert values(per_turn_ir(fin, lab, ["mrr@10"]))[("q1", "mrr@10")] == pytest.approx(0.5)


def test_rrf_matches_ranx_and_hand_values():
    from ranx import Run, fuse

    runs = [["a", "b", "c"], ["c", "a", "d"], ["d"]]
    ours = rrf(runs, k=60)
    hand = {"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 63 + 1 / 61}
    assert dict(ours) == pytest.approx(hand)
    assert [d for d, _ in ours] == ["a", "d", "c", "b"]  # c and d tie: doc id descending
    ranx_runs = [Run({"q": {d: float(len(r) - i) for i, d in enumerate(r)}}) for r in runs]
    fused = fuse(ranx_runs, method="rrf", params={"k": 60})
    assert dict(ours) == pytest.approx(dict(fused["q"]))
    assert [d for d, _ in rrf(runs, k=60, cap=2)] == ["a", "d"]
    assert dict(rrf([["a", "a", "b"]], k=1)) == pytest.approx({"a": 1 / 2, "b": 1 / 3})  # de-duplicated


def test_segment_grammar():
    df = pd.DataFrame({"turn_index": [1, 2, 3, 5], "query_type": ["a", "b", "a", "c"]})
    assert parse_segment("all").mask(df).tolist() == [True] * 4
    assert parse_segment("turn_index>=2").mask(df).tolist() == [False, True, True, True]
    assert parse_segment("turn_index<=2").mask(df).tolist() == [True, True, False, False]
    assert parse_segment("query_type=a").mask(df).tolist() == [True, False, True, False]
    assert parse_segment("query_type in [b, c]").mask(df).tolist() == [False, True, False, True]
    assert parse_segment("turn_index in [1, 5]").name == "turn_index in [1, 5]"
    with pytest.raises(ValueError):
        parse_segment("turn_index >> 2")
    both = parse_segment("query_type=a & turn_index>=2")
    assert both.mask(df).tolist() == [False, False, True, False] and both.name == "query_type=a & turn_index>=2"
    for bad in ("query_type=a &", "all & turn_index>=2", "query_type=a & turn_index >> 2"):
        with pytest.raises(ValueError):
            parse_segment(bad)


def test_ndcg_discounts_are_ranx_s_to_the_last_bit():
    """ranx's `_dcg` divides by numba's log2(rank + 1); numpy's log2 differs from it in the last
    bit for some ranks on CPUs where numpy takes its own SIMD loop (seen on one machine, equal on
    another: which loop runs depends on the CPU), so the harness computes its discounts with the C
    library's log2 as numba does, without importing numba."""
    import numpy as np
    from numba import njit

    from harness.metrics.families.ir import _discounts

    k = 10_000
    jit = njit(cache=False)(lambda n: np.log2(np.arange(1, n + 1) + 1))
    assert np.array_equal(_discounts(k), jit(k))
    assert np.array_equal(_discounts(7), jit(10)[:7]) and len(_discounts(0)) == 0
