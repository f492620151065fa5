"""`harness compare` and `harness gate` on constructed run folders with known effects."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli import app
from tests.evidence import seal

ARM = "rewrite(model=offline)"
LLM = "rewrite(model=gpt-4o-mini)"


CAPS = ["answers", "queries", "ranking", "replayed"]


def make_run(root: Path, name: str, arms: dict[str, dict], n_sessions=60, shift=0.0, errors=0.0, hash_="h1", seed=0,
             base_seed=0, faithful_sessions=None, judge_status="ok"):
    """arms: arm_id -> backends. Per-turn recall@10 from a fixed base (base_seed) plus `shift`;
    faithfulness on the first `faithful_sessions` sessions (all when None; the others abstained,
    so they have no row), each judgment with `judge_status`."""
    run = root / name
    run.mkdir(parents=True)
    rng = np.random.default_rng(base_seed)
    base = rng.uniform(0.2, 0.9, size=(n_sessions, 2))
    rows, labels = [], []
    for s in range(n_sessions):
        for t in (1, 2):
            labels.append({"session_id": f"s{s}", "turn_index": t, "split": "main", "domain": None, "query_type": "x",
                           "language": "en", "answerability": "ANSWERABLE", "multi_turn_type": None, "qrels": "{}",
                           "qrels_measured": True, "identifiers": [], "expected_filters": "[]", "reference_rewrite": None,
                           "reference_answer": None, "surface_doc": None, "user": "u", "segments": "{}"})
            for arm in arms:
                noise = np.random.default_rng(seed + s * 7 + t).normal(0, 0.01)
                v = float(np.clip(base[s, t - 1] + shift + noise, 0, 1))
                for metric, value in (("recall@10", v), ("ndcg@10", v), ("error_rate", float(s < errors * n_sessions)),
                                      ("identifier_preservation", 1.0), ("entitlement_violations", 0.0),
                                      ("cost_usd", 0.0), ("latency_total_ms", 100.0 + t)):
                    rows.append({"kind": "turn", "arm_id": arm, "metric": metric, "repeat": 0, "session_id": f"s{s}",
                                 "turn_index": t, "value": value, "unmeasured": None})
                if faithful_sessions is None or s < faithful_sessions:
                    ok = judge_status == "ok"
                    rows.append({"kind": "turn", "arm_id": arm, "metric": "faithfulness", "repeat": 0,
                                 "session_id": f"s{s}", "turn_index": t, "value": v if ok else None,
                                 "unmeasured": None if ok else judge_status})
    pd.DataFrame(rows).to_parquet(run / "metrics.parquet")
    pd.DataFrame(labels).to_parquet(run / "labels.parquet")
    man = {"run_id": name, "eval_set": {"name": "es", "version": "1", "hash": hash_},
           "arms": [{"arm_id": a, "arm": "rewrite", "params": {}, "backends": b, "capabilities": CAPS} for a, b in arms.items()]}
    (run / "manifest.json").write_text(json.dumps(man))
    return seal(run)


POLICY = """rules:
  - {metric: recall@10, segment: "turn_index>=2", arm: "*", max_drop: 0.02, alpha: 0.05, test: noninferiority}
  - {metric: ndcg@10, segment: all, arm: "*", max_drop: 0.02, alpha: 0.05, test: regression}
floors:
  - {metric: identifier_preservation, arm: "*", min: 0.99}
  - {metric: entitlement_violations, arm: "*", max: 0}
budgets:
  - {metric: latency_total_ms, stat: p95, max: 5000}
limits: {max_error_rate: 0.05, max_unmeasured_rate: 0.2}
"""


@pytest.fixture
def policy(tmp_path):
    p = tmp_path / "gate.yaml"
    p.write_text(POLICY)
    return p


def gate(tmp_path, base, cand, policy, *extra):
    return CliRunner().invoke(app, ["gate", "--baseline", str(base), "--candidate", str(cand), "--policy", str(policy),
                                    "-o", str(tmp_path / "out"), *extra])


def test_identical_candidate_passes(tmp_path, policy):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}})
    r = gate(tmp_path, b, c, policy)
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out/gate.md").read_text()
    assert "1 arm unchanged: identical rankings on every turn (rewrite): their " in md  # its checks in one line
    v = json.loads((tmp_path / "out/gate.json").read_text())
    assert v["verdict"] == "pass" and all(x["ok"] for x in v["results"])
    # from the baseline's spread between sessions, not from two identical runs' (zero) differences
    rules = [x for x in v["results"] if x["kind"] == "rule"]
    assert rules and all(x["mde"] > 0 and x["n_sessions"] == 60 for x in rules)


def test_injected_regression_fails_naming_the_rule(tmp_path, policy, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=-0.1, seed=1)
    r = gate(tmp_path, b, c, policy)
    assert r.exit_code == 1, r.output
    md = (tmp_path / "out/gate.md").read_text()
    assert "**FAIL**" in md and "rule 1: noninferiority recall@10 [turn_index>=2]" in md
    assert "[turn_index>=2]" in r.output, r.output  # not eaten as console markup
    junit = (tmp_path / "out/gate.junit.xml").read_text()
    assert junit.count("<testcase") == 5 and "<failure message=\"candidate − baseline -0." in junit and "beyond the allowed drop 0.02" in junit
    assert "rule 2: regression ndcg@10 [all]" in junit and summary.read_text() == md


def test_a_model_change_pairs_by_label_and_is_shown(tmp_path, policy):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {LLM: {"rewrite": "gpt-4o-mini"}}, shift=0.05, seed=2)
    r = gate(tmp_path, b, c, policy)
    assert r.exit_code == 0, r.output
    v = json.loads((tmp_path / "out/gate.json").read_text())
    assert [(p["baseline_arm"], p["candidate_arm"], p["changes"]) for p in v["pairs"]] == \
        [(ARM, LLM, ["model offline → gpt-4o-mini"])]
    assert v["results"][0]["diff"] > 0.04 and "model offline → gpt-4o-mini" in r.output
    r = gate(tmp_path, b, c, policy, "--pair", f"{ARM}={LLM}")  # a named pair, by id
    assert r.exit_code == 0, r.output
    r = gate(tmp_path, b, c, policy, "--pair", "rewrit=rewrite")
    assert r.exit_code == 2 and "did you mean 'rewrite'?" in r.output


def test_faithfulness_on_two_sessions_is_insufficient_data(tmp_path):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, faithful_sessions=2)
    p = tmp_path / "faith.yaml"
    p.write_text("rules:\n  - {metric: faithfulness, max_drop: 0.05}\n")
    r = gate(tmp_path, b, c, p)
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "out/gate.json").read_text())
    assert v["results"][0]["status"] == "insufficient" and "insufficient data: 2 session(s)" in v["results"][0]["detail"]
    assert v["infrastructure"] == []  # abstained turns are not unmeasured
    p.write_text("min_sessions: 2\nrules:\n  - {metric: faithfulness, max_drop: 0.05}\n")
    assert gate(tmp_path, b, c, p).exit_code == 0


def test_failed_judgments_are_infrastructure(tmp_path):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, judge_status="error: APIConnectionError")
    p = tmp_path / "faith.yaml"
    p.write_text("rules:\n  - {metric: faithfulness, max_drop: 0.05}\n")
    r = gate(tmp_path, b, c, p)
    assert r.exit_code == 3, r.output
    assert "faithfulness unmeasured on 120 of 120 turns" in (tmp_path / "out/gate.md").read_text()
    n = make_run(tmp_path, "notjudged", {ARM: {"rewrite": "offline"}}, judge_status="not measured: no judge endpoint")
    r = gate(tmp_path, b, n, p)
    assert r.exit_code == 2 and "llm.roles.judge" in r.output


def test_errors_over_the_limit_are_infrastructure(tmp_path, policy):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, errors=0.2)
    r = gate(tmp_path, b, c, policy)
    assert r.exit_code == 3, r.output
    assert "rewrite: 24 of 120 turns failed (20.0% > 5.0%" in (tmp_path / "out/gate.md").read_text()


def test_malformed_policy_names_the_line(tmp_path):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    p = tmp_path / "bad.yaml"
    p.write_text("rules:\n  - {metric: recall@10, max_drop: -1}\n  - {metric: ndcg@10, max_drop: 0.1, tset: regression}\n")
    r = gate(tmp_path, b, b, p)
    assert r.exit_code == 2
    assert "bad.yaml:2: rules.0.max_drop" in r.output and "bad.yaml:3: rules.1.tset" in r.output
    p.write_text("rules: [\n")
    r = gate(tmp_path, b, b, p)
    assert r.exit_code == 2 and "invalid YAML" in r.output


def test_compare_refuses_other_evalset_versions_and_saves_tables(tmp_path):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=0.1, seed=3)
    d = make_run(tmp_path, "other", {ARM: {"rewrite": "offline"}}, hash_="h2")
    r = CliRunner().invoke(app, ["compare", str(b), str(d), "-o", str(tmp_path / "cmp")])
    assert r.exit_code == 2 and "--allow-different-evalsets" in r.output
    r = CliRunner().invoke(app, ["compare", str(b), str(c), "-m", "recall@10", "-s", "all", "-s", "turn_index>=2",
                                 "-o", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    csv = pd.read_csv(tmp_path / "cmp/compare.csv")
    assert len(csv) == 2 and (csv["diff"] > 0.09).all() and (csv["p_holm"] < 0.01).all()
    assert (csv["wins"] > 0.9 * csv["n_turns"]).all()
    assert "| cand |" in (tmp_path / "cmp/compare.md").read_text()


def test_compare_takes_conjunctions_and_warns_on_empty_segments(tmp_path):
    b = make_run(tmp_path, "base", {ARM: {"rewrite": "offline"}})
    c = make_run(tmp_path, "cand", {ARM: {"rewrite": "offline"}}, shift=0.1, seed=3)
    r = CliRunner().invoke(app, ["compare", str(b), str(c), "-m", "recall@10", "-s", "all",
                                 "-s", "turn_index>=1 & turn_index<=1", "-s", "turn_index>=99", "-o", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    csv = pd.read_csv(tmp_path / "cmp/compare.csv").set_index("segment")
    assert 0 < csv.loc["turn_index>=1 & turn_index<=1", "n_turns"] < csv.loc["all", "n_turns"]
    assert csv.loc["turn_index>=99", "n_turns"] == 0
    assert "segment 'turn_index>=99' matches no measured turn" in r.output
    assert "turn_index>=1 & turn_index<=1'" not in r.output
