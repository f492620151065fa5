"""Verdicts you can trust (each observation of the verdicts issue, on real runs where it was seen):
every arm paired by label or named, lower-is-better metrics read the right way, every metric name
checked, thin data never a pass, honest exit codes, external runs, entitlement near names."""
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT
from tests.evidence import BASELINE, POLICY, invoke
from tests.evidence import gate as gate_to


def gate(tmp_path, base, cand, policy, *extra):
    return gate_to(tmp_path / "gate", base, cand, policy, *extra)


def policy_file(tmp_path, text: str, name="policy.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def run_config(tmp: Path, name: str, eval_set: str, arms: list, emb: Path | None = None) -> Path:
    cfg = {"name": name, "eval_set": str(ROOT / eval_set), "arms": arms, "runs_dir": str(tmp / "runs"), "concurrency": 4}
    if emb is not None:
        cfg["index"] = {"embedding_cache": str(emb)}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def b2b_candidate(tmp_path_factory):
    """A candidate of configs/b2b.yaml with arms [original, {name: rewrite, last_n: 1}], replayed."""
    tmp = tmp_path_factory.mktemp("b2bcand")
    emb = tmp / "emb"
    shutil.copytree(ROOT / "eval_sets/b2b-shop/embeddings", emb)  # new query vectors land here, not in eval_sets
    cfg = run_config(tmp, "cand", "eval_sets/b2b-shop", ["original", {"name": "rewrite", "last_n": 1}], emb)
    r = invoke("run", cfg, "--run-id", "cand", "--no-progress")
    assert r.exit_code == 0, r.output
    return tmp / "runs" / "cand"


@pytest.fixture(scope="module")
def handbook_runs(tmp_path_factory):
    """handbook-de: the corrective loop as shipped, and a candidate whose offline grader is too
    strict (a much higher z_min), under the same label."""
    tmp = tmp_path_factory.mktemp("hb")
    out = {}
    for name, extra in (("base", {}), ("strict", {"z_min": 20.0})):
        cfg = run_config(tmp, name, "eval_sets/handbook-de", ["original", {"name": "corrective", "top_k": 3,
                                                                           "max_rounds": 3, **extra}])
        r = invoke("run", cfg, "--run-id", name, "--no-progress")
        assert r.exit_code == 0, r.output
        out[name] = tmp / "runs" / name
    return out


# 1. a changed arm is never left out silently -------------------------------------------------

def test_a_changed_arm_is_gated_and_unpaired_labels_are_refused(b2b_candidate, tmp_path):
    r = gate(tmp_path, BASELINE, b2b_candidate, POLICY)
    assert r.exit_code == 2, r.output
    for label in ("concat", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde", "oracle"):
        assert label in r.output
    assert "unpaired: warn" in r.output
    warn = policy_file(tmp_path, POLICY.read_text().replace("unpaired: error", "unpaired: warn"))
    r = gate(tmp_path, BASELINE, b2b_candidate, warn)
    assert r.exit_code == 1, r.output  # HQE with one turn of history loses follow-ups: compared, and caught
    v = json.loads((tmp_path / "gate/gate.json").read_text())
    # failed as a regression, or as insufficient data where the CI straddles the margin on a set too small
    failed = {(x["label"], x["metric"], x["segment"]) for x in v["results"] if not x["ok"]}
    assert {lab for lab, _, _ in failed} == {"rewrite"} and ("rewrite", "recall@10", "turn_index>=2") in failed, failed
    assert not [f for f in failed if f[2] == "turn_index=1"], failed  # one turn of history: first turns unchanged
    pairs = {p["label"]: p for p in v["pairs"]}
    assert set(pairs) == {"original", "rewrite"} and pairs["rewrite"]["changes"] == ["last_n 4 → 1"]
    assert any("rewrite" in x["name"] and x["kind"] == "rule" for x in v["results"])
    md = (tmp_path / "gate/gate.md").read_text()
    assert "last_n 4 → 1" in md and "not compared" in md and "oracle" in md


def _with_rewrite_changed(src: Path, dst: Path) -> Path:
    """The baseline run folder with the rewrite arm's last_n set to 1 (id, parameters, rows)."""
    shutil.copytree(src, dst)
    man = json.loads((dst / "manifest.json").read_text())
    old = next(a for a in man["arms"] if a["arm"] == "rewrite")
    new_id = old["arm_id"].replace("last_n=4", "last_n=1")
    old.update(arm_id=new_id, params={**old["params"], "last_n": 1})
    old.pop("label", None)
    (dst / "manifest.json").write_text(json.dumps(man))
    for p in [*(dst / "traces").glob("*.parquet"), dst / "metrics.parquet"]:
        t = pq.read_table(p).to_pandas()
        mine = t["arm_id"] == old["arm_id"].replace("last_n=1", "last_n=4")
        t.loc[mine, "arm_id"] = new_id
        if "params" in t:  # the trace rows say what the manifest says of their arm
            t.loc[mine, "params"] = t.loc[mine, "params"].str.replace('"last_n":4', '"last_n":1')
        t.to_parquet(p, index=False)
    return dst


def test_the_full_arm_list_with_one_change_gates_all_eight_labels(tmp_path):
    cand = _with_rewrite_changed(BASELINE, tmp_path / "cand")
    r = gate(tmp_path, BASELINE, cand, POLICY)
    assert r.exit_code == 0, r.output
    v = json.loads((tmp_path / "gate/gate.json").read_text())
    assert len(v["pairs"]) == 8 and {p["label"] for p in v["pairs"]} >= {"rewrite", "oracle", "concat"}
    changed = [p for p in v["pairs"] if p["changes"]]
    assert [(p["label"], p["changes"]) for p in changed] == [("rewrite", ["last_n 4 → 1"])]
    assert {x["label"] for x in v["results"] if x["kind"] == "rule"} == {p["label"] for p in v["pairs"]}


def test_the_committed_baseline_gated_against_itself_passes(tmp_path):
    r = gate(tmp_path, BASELINE, BASELINE, POLICY)
    assert r.exit_code == 0, r.output


# 2. lower-is-better metrics, and metrics whose direction the segment decides -----------------

def test_a_too_strict_grader_fails_abstention_rounds_and_latency_rules(handbook_runs, tmp_path):
    p = policy_file(tmp_path, """rules:
  - {metric: abstained, segment: "answerability=ANSWERABLE", direction: lower, max_drop: 0.05}
  - {metric: rounds_used, max_drop: 0.2}
  - {metric: wasted_rounds, max_drop: 0.2, test: regression}
""")
    r = gate(tmp_path, handbook_runs["base"], handbook_runs["strict"], p)
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "gate/gate.json").read_text())
    res = {(x["metric"], x["label"]): x for x in v["results"]}
    ab = res[("abstained", "corrective")]
    assert ab["status"] == "fail" and ab["direction"] == "lower" and ab["diff"] > 0.5
    assert ab["segment"] == "answerability=ANSWERABLE" and len(ab["moved"]) == 10
    assert all(t["candidate"] > t["baseline"] for t in ab["moved"])
    assert res[("rounds_used", "corrective")]["status"] == "fail"
    assert res[("abstained", "original")]["status"] == "n/a"  # original does not answer: shown, not failed
    md = (tmp_path / "gate/gate.md").read_text()
    assert "abstained [answerability=ANSWERABLE] corrective" in md and "lower is better" in md
    assert "z_min 6.81 → 20.0" in md


def test_a_rule_on_a_metric_without_direction_must_state_one(handbook_runs, tmp_path):
    p = policy_file(tmp_path, "rules:\n  - {metric: recall@10, max_drop: 0.1}\n  - {metric: abstained, max_drop: 0.05}\n")
    r = gate(tmp_path, handbook_runs["base"], handbook_runs["strict"], p)
    assert r.exit_code == 2 and "policy.yaml:3: rules.1.direction" in r.output


def test_compare_counts_more_rounds_as_losses(handbook_runs, tmp_path):
    r = invoke("compare", handbook_runs["base"], handbook_runs["strict"], "-m", "rounds_used", "-m", "recall@10",
               "-s", "all", "-o", tmp_path / "cmp")
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "cmp/compare.csv").set_index(["label", "metric"])
    rounds = df.loc[("corrective", "rounds_used")]
    assert rounds["diff"] > 0 and rounds["losses"] > rounds["wins"] and rounds["direction"] == "lower"
    assert ("original", "rounds_used") not in df.index and "rounds_used is n/a for original" in r.output


# 3. every metric name is checked -------------------------------------------------------------

@pytest.mark.parametrize("section,entry,line,suggested", [
    ("floors", "{metric: identifer_preservation, min: 0.99}", 3, "identifier_preservation"),
    ("budgets", "{metric: cost_usdd, max: 0.01}", 3, "cost_usd"),
    ("budgets", "{metric: latency_totl_ms, stat: p95, max: 5000}", 3, "latency_total_ms"),
    ("rules", "{metric: ndgc@10, max_drop: 0.03}", 3, "ndcg@10"),
])
def test_a_typo_in_a_policy_exits_2_naming_file_line_and_the_fix(tmp_path, section, entry, line, suggested):
    p = policy_file(tmp_path, f"# policy\n{section}:\n  - {entry}\n")
    r = gate(tmp_path, BASELINE, BASELINE, p)
    assert r.exit_code == 2, r.output
    field = f"{section}.0.metric"
    assert f"policy.yaml:{line}: {field}: unknown metric" in r.output
    assert f"did you mean '{suggested}'" in r.output and "harness list metrics" in r.output


def test_the_shipped_identifier_floor_is_na_on_a_set_without_identifiers(handbook_runs, tmp_path):
    # the shipped policy without its follow-up rules: handbook-de has single questions, and a rule
    # on a segment no turn of either run has is refused (tests/analysis/test_evidence.py)
    text = "\n".join(x for x in POLICY.read_text().splitlines() if "turn_index" not in x)
    r = gate(tmp_path, handbook_runs["base"], handbook_runs["base"], policy_file(tmp_path, text))
    assert r.exit_code == 0, r.output
    v = json.loads((tmp_path / "gate/gate.json").read_text())
    ids = [x for x in v["results"] if x.get("metric") == "identifier_preservation" or "identifier_preservation" in x["name"]]
    assert ids and all(x["status"] == "n/a" for x in ids)
    assert "no turn of this eval set measures identifier_preservation" in (tmp_path / "gate/gate.md").read_text()


def test_unknown_metrics_on_the_command_line_exit_2(tmp_path):
    r = invoke("compare", BASELINE, BASELINE, "-m", "recal@10", "-o", tmp_path / "cmp")
    assert r.exit_code == 2 and "unknown metric 'recal@10'; did you mean 'recall@10'?" in r.output
    run = tmp_path / "run"
    shutil.copytree(BASELINE, run)
    r = invoke("metrics", run, "-m", "recal@10")
    assert r.exit_code == 2 and "did you mean 'recall@10'?" in r.output
    r = invoke("metrics", run, "-m", "recall@7")  # a ranking measure the run's settings lack: computed on request
    assert r.exit_code == 0 and "recall@7 on b2b-shop" in r.output
    r = invoke("compare", run, BASELINE, "-m", "recall@7", "-o", tmp_path / "cmp")  # the baseline lacks it
    assert r.exit_code == 2 and "recall@7 was not computed for b2b" in r.output and "-m recall@7" in r.output
    r = invoke("metrics", run, "-m", "faithfulness")
    assert r.exit_code == 2 and "no arm of this run does what it needs (answers)" in r.output


def test_list_metrics_names_every_direction():
    r = invoke("list", "metrics")
    assert r.exit_code == 0
    for name in ("recall@k", "rounds_used", "abstained", "latency_total_ms", "faithfulness"):
        assert name in r.output


# 4. thin data is never a pass ------------------------------------------------------------------

def test_identical_runs_state_a_detectable_change_or_not_estimable(tmp_path):
    gate(tmp_path, BASELINE, BASELINE, POLICY)
    md = (tmp_path / "gate/gate.md").read_text()
    rules = [x for x in json.loads((tmp_path / "gate/gate.json").read_text())["results"] if x["kind"] == "rule"]
    assert rules and all(x["mde"] > 0.005 for x in rules)  # the baseline's spread, not two identical runs' zero
    assert "8 arms unchanged: identical rankings on every turn" in md and "0.0000 (50 sessions)" not in md


# 6. external runs ------------------------------------------------------------------------------

def _external_run_file(path: Path, qid) -> Path:
    t = pq.read_table(BASELINE / "traces").to_pandas()
    t = t[t["arm"] == "original"]
    lines = [f"{qid(r.session_id, r.turn_index)} Q0 {d} {i + 1} {100 - i} ext"
             for r in t.itertuples() for i, d in enumerate(list(r.ranking)[:20])]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_run_refuses_ids_that_name_no_turn(tmp_path):
    bad = _external_run_file(tmp_path / "bad.run", lambda s, t: f"{s}-{t}")
    r = invoke("import", "run", bad, "--eval-set", ROOT / "eval_sets/b2b-shop", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2, r.output
    assert "SESSION_ID::TURN_INDEX" in r.output and "::" in r.output.split("e.g.")[-1]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_imported_run_is_gated_without_query_metrics(tmp_path):
    good = _external_run_file(tmp_path / "ext.run", lambda s, t: f"{s}::{t}")
    lines = good.read_text().splitlines()
    first = lines[0].split()[0]
    good.write_text("\n".join(x for x in lines if x.split()[0] != first) + "\n")  # one turn missing
    r = invoke("import", "run", good, "--eval-set", ROOT / "eval_sets/b2b-shop", "--runs-dir", tmp_path / "runs",
               "--run-id", "ext")
    assert r.exit_code == 0, r.output
    assert "1 of 204 labelled turns are missing" in r.output
    warn = policy_file(tmp_path, POLICY.read_text().replace("unpaired: error", "unpaired: warn"))
    r = gate(tmp_path, BASELINE, tmp_path / "runs/ext", warn, "--pair", "original=ext")
    v = json.loads((tmp_path / "gate/gate.json").read_text())
    floor = [x for x in v["results"] if "identifier_preservation" in x["name"]]
    assert floor and all(x["status"] == "n/a" and "ext is an imported run file (rankings only)" in x["detail"]
                         for x in floor)
    # the missing query is a first turn with no ranking: the shipped policy's first-turn rules catch it
    # (one first turn in 50 sessions: within the CI of a set this size, so insufficient data, exit 1)
    failed = {(x["metric"], x["segment"]): x["status"] for x in v["results"] if not x["ok"]}
    assert r.exit_code == 1 and failed == {("recall@10", "turn_index=1"): "insufficient",
                                           ("ndcg@10", "turn_index=1"): "insufficient"}, r.output


# 5. exit codes of a run ------------------------------------------------------------------------

def test_a_run_whose_llm_calls_all_fail_exits_3_and_keeps_its_rows(tmp_path):
    from harness.testing import TestServer
    from tests.conftest import write_set

    es = write_set(tmp_path / "tiny")
    with TestServer() as srv:
        srv.set_faults("500")
        cfg = {"name": "down", "eval_set": str(es), "arms": ["rewrite"], "runs_dir": str(tmp_path / "runs"),
               "llm": {"cache": {"folder": str(tmp_path / "llm"), "mode": "off"},
                       "roles": {"rewrite": {"kind": "openai-compatible", "base_url": srv.base_url, "model": "m",
                                             "max_retries": 0, "timeout": 5}}}}
        p = tmp_path / "down.yaml"
        p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        r = invoke("run", p, "--run-id", "down", "--no-progress")
    assert r.exit_code == 3, r.output
    assert "3 of 3 replayed turns failed" in r.output
    rows = pq.read_table(tmp_path / "runs/down/traces").to_pandas()
    assert len(rows) == 3 and rows["fallback_reason"].str.contains("rewrite failed").all()
