"""Results people can read: labels in every terminal table, 120 columns, coinciding arms said once,
comparisons within one run, TREC export, make targets and help that say what they need."""
import json
import subprocess

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.metrics.coinciding import coinciding_arms
from tests.conftest import ROOT

LABELS = ("top_k=1", "top_k=3", "max_rounds=1", "max_rounds=3")


def invoke(*args, columns: int = 120):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    cfg = {"name": "sweep", "eval_set": str(ROOT / "eval_sets/handbook-de"), "runs_dir": str(tmp / "runs"),
           "arms": ["original", {"name": "corrective", "top_k": [1, 3], "max_rounds": [1, 3]}]}
    (tmp / "sweep.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    r = invoke("run", tmp / "sweep.yaml", "--run-id", "sweep", "--no-progress")
    assert r.exit_code == 0, r.output
    return tmp / "runs" / "sweep"


def test_metrics_compare_and_gate_fit_120_columns_and_name_arms_by_label(sweep, tmp_path):
    r = invoke("metrics", sweep)
    assert r.exit_code == 0, r.output
    assert widest(r.output) <= 120 and all(x in r.output for x in LABELS)
    assert "corrective top_k=1 max_rounds=3" in r.output  # a label on one line
    assert "corrective(" not in r.output  # no full arm id
    assert r.output.count("\n") <= 150
    r = invoke("compare", sweep, sweep, "-o", tmp_path / "cmp")
    assert r.exit_code == 0, r.output  # every arm unchanged: named in one line
    assert widest(r.output) <= 120 and all(x in r.output for x in LABELS)
    r = invoke("compare", sweep, sweep, "--all", "-o", tmp_path / "cmp")  # and their rows
    assert r.exit_code == 0, r.output
    assert widest(r.output) <= 120 and all(x in r.output for x in LABELS)
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - {metric: recall@10, max_drop: 0.05}\n  - {metric: rounds_used, max_drop: 0.5}\n")
    r = invoke("gate", "--baseline", sweep, "--candidate", sweep, "--policy", policy, "-o", tmp_path / "gate")
    assert r.exit_code == 0, r.output
    assert widest(r.output) <= 120 and all(x in r.output for x in LABELS)
    assert widest(invoke("metrics", sweep, columns=80).output) <= 80  # COLUMNS is respected (tests/cli/test_tables_fit.py)


def test_compare_within_one_run_against_a_reference_on_any_segment(sweep, tmp_path):
    r = invoke("compare", sweep, "--reference", "original", "-m", "recall@10", "-s", "all", "-s", "split=test",
               "-o", tmp_path / "cmp")
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "cmp/compare.csv")
    assert set(df["label"]) == {f"corrective top_k={k} max_rounds={m}" for k in (1, 3) for m in (1, 3)}
    assert set(df["segment"]) == {"all", "split=test"} and (df["n_turns"] > 0).all()
    r = invoke("compare", sweep, "--reference", "orignal", "-o", tmp_path / "cmp")
    assert r.exit_code == 2 and "did you mean 'original'?" in r.output


def test_coinciding_arms_are_said_once_with_the_reason_the_traces_record():
    final = pd.DataFrame([
        {"arm_id": a, "repeat": 0, "session_id": f"s{i}", "turn_index": 1, "ranking": rk,
         "verdict_reason": why, "not_applicable": None, "error": None}
        for i in range(6)
        for a, rk, why in (("rewrite", ["d1", f"d{i}"], None),
                           ("rewrite_hyde", ["d1", f"d{i}"], "HyDE skipped: turn class identifier" if i % 2
                            else "HyDE skipped: identifier turn; x"),
                           ("multi", ["d2", f"d{i}"], None))])
    co = coinciding_arms(final, ["rewrite", "rewrite_hyde", "multi"])
    assert len(co) == 1
    row = co.iloc[0]
    assert row["arm_id"] == "rewrite" and list(row["same_as"]) == ["rewrite_hyde"] and row["n_turns"] == 6
    assert row["reasons"][0] == "HyDE skipped (identifier turn 3, turn class identifier 3)"
    assert coinciding_arms(final[final["arm_id"] != "rewrite_hyde"], ["rewrite", "multi"]).empty


def test_a_scored_run_names_its_coinciding_arms(tmp_path):
    run = tmp_path / "b2b"
    import shutil

    shutil.copytree(ROOT / "runs/baselines/b2b", run)
    r = invoke("metrics", run)
    assert r.exit_code == 0, r.output
    assert "rewrite_hyde" in r.output and "identical top 10" in r.output and "HyDE skipped" in r.output
    assert pq.read_table(run / "coinciding.parquet").num_rows >= 1


def test_an_exported_arm_scores_as_the_run_does(tmp_path):
    base = ROOT / "runs/baselines/b2b"
    assert invoke("export", "trec", base, "--arm", "original", "-o", tmp_path / "o.run").exit_code == 0
    assert invoke("export", "qrels", ROOT / "eval_sets/b2b-shop", "-o", tmp_path / "q.txt").exit_code == 0
    r = invoke("trec-eval", tmp_path / "q.txt", tmp_path / "o.run", "-m", "recall@10", "-m", "ndcg@10")
    assert r.exit_code == 0, r.output
    got = {ln.split()[0]: float(ln.split()[2]) for ln in r.output.splitlines() if ln.split()[1:2] == ["all"]
           and not ln.startswith("num_q")}
    m = pd.read_parquet(base / "metrics.parquet")
    man = json.loads((base / "manifest.json").read_text())
    arm = next(a["arm_id"] for a in man["arms"] if a["arm"] == "original")
    agg = m[(m["kind"] == "aggregate") & (m["segment"] == "all") & (m["arm_id"] == arm)].set_index("metric")["mean"]
    for name, printed in (("recall@10", "recall_10"), ("ndcg@10", "ndcg_cut_10")):  # trec_eval's names
        assert round(got[printed], 4) == round(float(agg[name]), 4)
    r = invoke("export", "trec", base, "--arm", "orignal", "-o", tmp_path / "x.run")
    assert r.exit_code == 2 and "did you mean 'original'?" in r.output


@pytest.mark.parametrize("target,says", [("compare", "set A= and B="), ("gate", "set BASELINE= and CANDIDATE="),
                                         ("report", "set RUNS=")])
def test_make_targets_say_which_variables_to_set(target, says):
    r = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and says in r.stdout + r.stderr


def test_help_reads_naturally():
    assert "--no-no-progress" not in invoke("run", "--help", columns=200).output
    out = invoke("trec-eval", "--help", columns=200).output
    assert "-q" in out and "trec_eval's -q" in out and "--means-only" not in out


def test_an_arm_is_called_na_only_when_no_metric_measures_it():
    """A metric with no value for an arm (cost_usd of an unpriced model) is not the arm being n/a."""
    from types import SimpleNamespace

    from harness.report.terminal import notes
    agg = pd.DataFrame([{"arm_id": "a", "metric": "recall@10", "segment": "all", "n": 61},
                        {"arm_id": "a", "metric": "cost_usd", "segment": "all", "n": 0},
                        {"arm_id": "b", "metric": "recall@10", "segment": "all", "n": 0},
                        {"arm_id": "b", "metric": "cost_usd", "segment": "all", "n": 0}])
    res = SimpleNamespace(aggregates=agg, per_turn=pd.DataFrame({"metric": []}))
    from harness.store.record import Manifest

    said = notes(res, Manifest(run_id="x"), {"a": "corrective", "b": "hyde"}, judged=False)
    assert not any("corrective is n/a" in s for s in said) and any("hyde is n/a on every turn" in s for s in said)


def test_the_paired_table_prints_no_nan_for_an_arm_measured_nowhere():
    """mtrag-un's oracle has no reference rewrites: its paired row said `+nan [+nan, +nan] nan`."""
    import io

    import pandas as pd
    from rich.console import Console

    from harness.report import terminal

    nan = float("nan")
    row = dict(reference="original(x)", metric="recall@10", segment="turn_index>=2", n_sessions=0, diff=nan,
               ci_lo=nan, ci_hi=nan, p_holm=nan, wins=0, ties=0, losses=0, oracle_gap_closed=None)
    pt = pd.DataFrame([{**row, "arm": "oracle(x)", "n_turns": 0},
                       {**row, "arm": "rewrite(x)", "n_turns": 8, "n_sessions": 3, "diff": 0.1, "ci_lo": 0.0,
                        "ci_hi": 0.2, "p_holm": 0.04, "wins": 3}])
    out = io.StringIO()
    Console(file=out, width=120).print(terminal.paired(pt, {"oracle(x)": "oracle", "rewrite(x)": "rewrite"}))
    text = out.getvalue()
    assert "nan" not in text and "not measured" in text and "+0.100" in text
