"""Metrics beyond ranking on constructed traces, trec-eval and `import run`."""
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.metrics.compute import compute_metrics, write_metrics
from harness.metrics.families.guards import filter_fields_table
from tests.oracle_metrics import per_turn_guards, per_turn_ops
from harness.analysis.trec_eval import score_run
from harness.importers.trec import RunFileError, read_trec_run
from tests.conftest import write_set

SCHEMA = [{"field": "material", "kind": "preference", "unit": None}, {"field": "container_ml", "kind": "preference", "unit": "ml"},
          {"field": "assortment", "kind": "entitlement", "unit": None}]


def labels(rows):
    return pd.DataFrame([{"session_id": s, "turn_index": 1, "user": u, "identifiers": ids, "qrels": json.dumps(q),
                          "expected_filters": json.dumps(ef)} for s, u, ids, q, ef in rows])


def rounds(rows):
    return pd.DataFrame([{"arm_id": "a", "repeat": 0, "session_id": s, "turn_index": 1, "round": rnd, "is_final": fin,
                          "issued_queries": qs, "applied_filters": json.dumps(af), "filter_violations": viol,
                          "ranking": rk, "not_applicable": None, "error": None} for s, rnd, fin, qs, af, viol, rk in rows])


def vals(df):
    return {(r.session_id, r.metric): r.value for r in df.itertuples()}


def test_identifier_preservation_counts_every_issued_query():
    lab = labels([("s1", "4711-32 and 4711-33 please", ["4711-32", "4711-33"], {"d1": 1}, []),
                  ("s2", "no ids here", ["4711-32"], {"d1": 1}, [])])
    r = rounds([("s1", 1, False, ["4711-32 4711-33 bolts"], [], [], ["d1"]),
                ("s1", 2, True, ["4711-32 bolts"], [], [], ["d1"]),
                ("s2", 1, True, ["bolts"], [], [], ["d1"])])
    v = vals(per_turn_guards(r, lab, SCHEMA))
    assert v[("s1", "identifier_preservation")] == 0.5  # 4711-33 dropped in round 2
    assert v[("s1", "identifier_dropped")] == 1.0
    assert ("s2", "identifier_preservation") not in v  # the label names an id the user did not type


def test_filter_precision_recall_normalise_units_and_skip_entitlements():
    lab = labels([("s1", "x", [], {"d1": 1}, [{"field": "container_ml", "op": "eq", "value": 5000},
                                             {"field": "material", "op": "eq", "value": "Brass"}])])
    r = rounds([("s1", 1, True, ["q"], [{"field": "container_ml", "op": "eq", "value": "5 l"},
                                        {"field": "material", "op": "eq", "value": "steel"},
                                        {"field": "assortment", "op": "eq", "value": "A"}], ["assortment"], ["d9"])])
    v = vals(per_turn_guards(r, lab, SCHEMA))
    assert v[("s1", "filter_precision")] == 0.5 and v[("s1", "filter_recall")] == 0.5
    assert v[("s1", "entitlement_violations")] == 1.0
    assert v[("s1", "wrong_filter_zero_relevant")] == 1.0
    t = filter_fields_table(r, lab, SCHEMA).set_index("field")
    assert t.loc["container_ml", "precision"] == 1.0 and t.loc["material", "recall"] == 0.0
    assert "assortment" not in t.index


def test_cost_unknown_is_unmeasured_not_zero_and_offline_costs_nothing():
    rows = pd.DataFrame([
        {"arm_id": "llm", "repeat": 0, "session_id": "s1", "turn_index": 1, "llm_calls": 2, "prompt_tokens": 10,
         "completion_tokens": 5, "cost_usd": None, "cache_hits": 1, "ms_rewrite": 5.0, "ms_retrieve": 1.0,
         "ms_grade": None, "ms_answer": None, "ms_total": 6.0, "not_applicable": None},
        {"arm_id": "off", "repeat": 0, "session_id": "s1", "turn_index": 1, "llm_calls": 0, "prompt_tokens": 0,
         "completion_tokens": 0, "cost_usd": None, "cache_hits": 0, "ms_rewrite": None, "ms_retrieve": 1.0,
         "ms_grade": None, "ms_answer": None, "ms_total": 1.0, "not_applicable": None}])
    df = per_turn_ops(rows).set_index(["arm_id", "metric"])
    assert np.isnan(df.loc[("llm", "cost_usd"), "value"]) and df.loc[("llm", "cost_usd"), "unmeasured"] == "price unknown"
    assert df.loc[("off", "cost_usd"), "value"] == 0.0
    assert df.loc[("llm", "cache_hit_rate"), "value"] == 0.5
    assert ("off", "cache_hit_rate") not in df.index


def test_trec_eval_conventions_by_hand(tmp_path):
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}, "q3": {"z": 0}}
    run = {"q1": {"b": 1.0, "a": 1.0, "x": 0.5}}  # a tie: doc id descending puts b before a
    df = score_run(qrels, run, ["mrr@10", "recall@1"])
    means = df[df["qid"] == "all"].set_index("metric")["value"]
    assert means["mrr@10"] == pytest.approx(0.5)  # q2 absent from the run: left out; q3 has no relevant doc
    assert set(df["qid"]) == {"q1", "all"}
    df = score_run(qrels, run, ["mrr@10"], complete=True)
    assert df[df["qid"] == "all"]["value"].iloc[0] == pytest.approx(0.25)
    p = tmp_path / "run.txt"
    p.write_text("q1 Q0 a 1 1.0 t\nq1 Q0 b 2 x t\n")
    with pytest.raises(ValueError, match="run.txt:2: score 'x'"):
        read_trec_run(p)
    p.write_text("q1 Q0 a 1 1.0 t\nq1 Q0 b 2 1.0\n")
    with pytest.raises(RunFileError, match="run.txt:2: expected 'qid Q0 docno rank score tag', got 5 fields"):
        read_trec_run(p)


def test_trec_eval_and_import_run_cli(tmp_path):
    es = write_set(tmp_path / "set")
    qrels = tmp_path / "qrels"
    qrels.write_text("s2::1 0 d3 1\n")
    run = tmp_path / "bm25.run"
    run.write_text("s2::1 Q0 d4 1 2.0 x\ns2::1 Q0 d3 2 1.0 x\ns1::1 Q0 d1 1 3.0 x\n")
    r = CliRunner().invoke(app, ["trec-eval", str(qrels), str(run), "-m", "mrr@10", "-m", "num_q", "-q"])
    assert r.exit_code == 0, r.output
    # num_q only when asked for, as trec_eval prints it
    assert "mrr@10                \ts2::1\t0.5000" in r.output and "num_q                 \tall\t1" in r.output
    r = CliRunner().invoke(app, ["import", "run", str(run), "--eval-set", str(es), "--runs-dir", str(tmp_path / "runs"),
                                 "--run-id", "ext"])
    assert r.exit_code == 0, r.output
    m = pd.read_parquet(tmp_path / "runs/ext/metrics.parquet")
    agg = m[(m["kind"] == "aggregate") & (m["metric"] == "mrr@10") & (m["segment"] == "all")]
    assert agg["arm_id"].tolist() == ["bm25"]
    # s1::1 ranks d1 first (1.0), s2::1 ranks d4 (grade 1 in the set) first (1.0), s1::2 is missing from the
    # run: an empty ranking scores 0 and the manifest counts it
    assert agg["n"].iloc[0] == 3 and agg["mean"].iloc[0] == pytest.approx(2 / 3)
    assert json.loads((tmp_path / "runs/ext/manifest.json").read_text())["counts"]["queries_missing_from_run"] == 1
