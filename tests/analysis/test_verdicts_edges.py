"""The gate's and compare's edges on constructed run folders: names that select nothing, checks that
apply to nothing, infrastructure behind floors, labels, named pairs."""
import json

import pytest
from typer.testing import CliRunner

from harness.errors import BadInput
from harness.store.armset import arm_info, derive_labels
from harness.cli import app
from harness.arms.catalog import build_arms
from tests.evidence import seal
from tests.analysis.test_compare_gate import ARM, make_run

BASE = {ARM: {"rewrite": "offline"}}


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def gate(tmp_path, base, cand, text, *extra):
    p = tmp_path / "policy.yaml"
    p.write_text(text, encoding="utf-8")
    return invoke("gate", "--baseline", base, "--candidate", cand, "--policy", p, "-o", tmp_path / "out", *extra)


@pytest.fixture
def runs(tmp_path):
    return make_run(tmp_path, "base", BASE), make_run(tmp_path, "cand", BASE, shift=0.01, seed=1)


@pytest.mark.parametrize("text,where,says", [
    ('rules:\n  - {metric: recall@10, segment: "split=mian", max_drop: 0.1}\n', "policy.yaml:2: rules.0.segment",
     "did you mean 'main'?"),
    ('rules:\n  - {metric: recall@10, segment: "splt=main", max_drop: 0.1}\n', "policy.yaml:2: rules.0.segment",
     "did you mean 'split'?"),
    ("rules:\n  - {metric: recall@10, max_drop: 0.1}\n  - {metric: rounds_used, max_drop: 0.1}\n",
     "policy.yaml:3: rules.1.metric", "rounds_used applies to no arm pair"),
    ("rules:\n  - {metric: recall@10, max_drop: 0.1, direction: lower}\n", "policy.yaml:2: rules.0.direction",
     "contradicts"),
    ("floors:\n  - {metric: recall@10}\n", "policy.yaml:2: floors.0.min", "needs min or max"),
    ("budgets:\n  - {metric: recall@10, max: 1}\n", "policy.yaml:2: budgets.0.metric", "use a floor"),
    ("rules:\n  - {metric: recall@10, max_drop: 0.1, arm: rewrit}\n", "policy.yaml:2: rules.0.arm",
     "did you mean 'rewrite'?"),
])
def test_what_would_select_nothing_is_bad_input(runs, tmp_path, text, where, says):
    r = gate(tmp_path, *runs, text)
    assert r.exit_code == 2, r.output
    assert where in r.output and says in r.output


def test_a_check_naming_an_arm_it_cannot_apply_to_exits_2(tmp_path):
    caps = ["queries", "ranking", "replayed"]  # no answers
    b = make_run(tmp_path, "base", BASE)
    for p in (b, make_run(tmp_path, "cand", BASE)):
        man = json.loads((p / "manifest.json").read_text())
        man["arms"][0]["capabilities"] = caps
        (p / "manifest.json").write_text(json.dumps(man))
        seal(p)
    r = gate(tmp_path, b, tmp_path / "cand", "floors:\n  - {metric: faithfulness, arm: rewrite, min: 0.5}\n")
    assert r.exit_code == 2 and "policy.yaml:2: floors.0.arm: faithfulness does not apply to rewrite" in r.output
    r = gate(tmp_path, b, tmp_path / "cand", "floors:\n  - {metric: faithfulness, min: 0.5}\n")
    assert r.exit_code == 2 and "nothing would be compared" in r.output  # every check n/a


def test_floors_see_infrastructure_and_missing_judgments(tmp_path):
    b = make_run(tmp_path, "base", BASE)
    broken = make_run(tmp_path, "broken", BASE, judge_status="error: APIConnectionError")
    r = gate(tmp_path, b, broken, "floors:\n  - {metric: faithfulness, min: 0.5}\n")
    assert r.exit_code == 3, r.output
    never = make_run(tmp_path, "never", BASE, faithful_sessions=0)
    r = gate(tmp_path, b, never, "rules:\n  - {metric: recall@10, max_drop: 0.1}\n"
             "floors:\n  - {metric: faithfulness, min: 0.5}\n")
    assert r.exit_code == 2 and "has no judgments" in r.output and "llm.roles.judge" in r.output


def test_floors_and_rules_need_min_sessions(tmp_path):
    b, c = make_run(tmp_path, "base", BASE, n_sessions=5), make_run(tmp_path, "cand", BASE, n_sessions=5)
    r = gate(tmp_path, b, c, "floors:\n  - {metric: recall@10, min: 0.0}\n")
    assert r.exit_code == 1 and "insufficient data: 5 session(s)" in r.output
    r = gate(tmp_path, b, c, "rules:\n  - {metric: recall@10, max_drop: 0.5, min_sessions: 4}\n")
    assert r.exit_code == 0, r.output
    r = gate(tmp_path, b, c, "min_sessions: 6\nrules:\n  - {metric: recall@10, max_drop: 0.5}\n")
    assert r.exit_code == 1 and "(min_sessions 6)" in r.output


def test_failed_llm_calls_of_a_run_are_infrastructure(runs, tmp_path):
    """Read from the traces, per arm: the manifest's counts say nothing failed."""
    b, c = runs
    seal(c, llm_failed=1.0)
    assert json.loads((c / "manifest.json").read_text()).get("counts", {}).get("turns_failed", 0) == 0
    r = gate(tmp_path, b, c, "rules:\n  - {metric: recall@10, max_drop: 0.5}\n")
    md = (tmp_path / "out/gate.md").read_text()
    assert r.exit_code == 3 and "rewrite: 120 of 120 turns failed" in md, md


def test_named_pairs_cannot_reuse_an_arm(runs, tmp_path):
    r = gate(tmp_path, *runs, "rules:\n  - {metric: recall@10, max_drop: 0.5}\n",
             "--pair", "rewrite=rewrite", "--pair", f"{ARM}=rewrite")
    assert r.exit_code == 2 and "already in another named pair" in r.output


def test_compare_refuses_what_compares_nothing(runs, tmp_path):
    r = invoke("compare", *runs, "-m", "rounds_used", "-o", tmp_path / "cmp")
    assert r.exit_code == 2 and "nothing to compare" in r.output and "rounds_used is n/a for rewrite" in r.output
    r = invoke("compare", *runs, "-m", "recall@10", "--arm", "rewrit", "-o", tmp_path / "cmp")
    assert r.exit_code == 2 and "did you mean 'rewrite'?" in r.output
    r = invoke("compare", *runs, "-m", "recall@10", "-s", "split=mian", "-o", tmp_path / "cmp")
    assert r.exit_code == 2 and "did you mean 'main'?" in r.output


def test_list_arms_names_capabilities():
    r = invoke("list", "arms")
    assert r.exit_code == 0 and "corrective" in r.output and "loops" in r.output and "proposes_filters" in r.output


def labels_of(arms: list) -> list[str]:
    from harness.config import parse_config

    cfg = parse_config({"name": "t", "eval_set": "x", "arms": arms})
    return [a.label for a in build_arms(cfg.configured_arms())]


def test_labels_name_only_what_differs_and_the_configs_label_wins():
    assert labels_of(["original", {"name": "corrective", "top_k": [1, 3], "max_rounds": [1, 3]}]) == [
        "original", "corrective top_k=1 max_rounds=1", "corrective top_k=1 max_rounds=3",
        "corrective top_k=3 max_rounds=1", "corrective top_k=3 max_rounds=3"]
    assert labels_of([{"name": "rewrite", "label": "mine"}, {"name": "rewrite", "last_n": 1}]) == ["mine", "rewrite"]
    assert labels_of([{"name": "corrective", "top_k": [1, 3], "label": "loop"}]) == ["loop top_k=1", "loop top_k=3"]
    with pytest.raises(BadInput, match="label 'x' names two arms"):
        labels_of([{"name": "rewrite", "label": "x"}, {"name": "original", "label": "x"}])


def test_labels_of_old_manifests_are_derived_the_same_way():
    entries = [{"arm_id": "corrective(max_rounds=1,top_k=1)", "arm": "corrective", "params": {"top_k": 1, "max_rounds": 1}},
               {"arm_id": "corrective(max_rounds=2,top_k=1)", "arm": "corrective", "params": {"top_k": 1, "max_rounds": 2}},
               {"arm_id": "original(depth=100)", "arm": "original", "params": {"depth": 100}}]
    labels = derive_labels([arm_info(e) for e in entries])
    assert list(labels.values()) == ["corrective max_rounds=1", "corrective max_rounds=2", "original"]
    assert "loops" in arm_info(entries[0]).capabilities and arm_info(entries[0]).hits_per_round == 1
