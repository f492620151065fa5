"""Every command ends with its answer (issue 30, item 2): the tail of a CI log says it. `gate` ends
with its verdict line (pass, regression, bad input or infrastructure; the failed checks by name;
the exit code and its meaning) whatever happened, `compare` with the arms that differ
significantly, `run` with turns, failures, seconds and the folder (tests/run/test_progress.py)."""
from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from harness.cli import app
from tests.conftest import ROOT


def invoke(*args, columns: int = 120):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    return r


def tail(text: str, n: int = 1) -> list[str]:
    return [x for x in text.splitlines() if x.strip()][-n:]


@pytest.fixture(scope="module")
def b2b(tmp_path_factory):
    """A copy of the committed baseline (gating it must not touch runs/baselines)."""
    run = tmp_path_factory.mktemp("answers") / "b2b"
    shutil.copytree(ROOT / "runs/baselines/b2b", run)
    return run


def test_a_failed_gate_ends_with_its_verdict_and_the_failed_checks_by_name(b2b, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - {metric: recall@10, max_drop: 0.02}\n"
                      "floors:\n  - {metric: recall@10, arm: original, min: 0.9}\n", encoding="utf-8")
    r = invoke("gate", "--baseline", b2b, "--candidate", b2b, "--policy", policy, "-o", tmp_path / "g")
    assert r.exit_code == 1, r.output
    last = tail(r.output)[0]
    assert last.startswith("Gate: REGRESSION (exit 1: regression or insufficient data)"), r.output
    assert "floor 1: recall@10 [all] original" in last and "1 of 9 checks failed" in last, last
    said = tail(r.output, 3)
    assert any(x.startswith("failed: floor 1: recall@10 [all] original: mean 0.4") for x in said), said


def test_a_passing_gate_ends_with_pass_and_its_count(b2b, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - {metric: recall@10, max_drop: 0.02}\n", encoding="utf-8")
    r = invoke("gate", "--baseline", b2b, "--candidate", b2b, "--policy", policy, "-o", tmp_path / "g")
    assert r.exit_code == 0, r.output
    assert tail(r.output) == ["Gate: pass (exit 0: pass); 8 checks, none failed"], r.output


@pytest.mark.parametrize("policy_text,says", [
    ("rules:\n  - {metric: recal@10, max_drop: 0.02}\n", "did you mean"),  # the policy is refused
    (None, "No such file"),  # no policy file
])
def test_a_gate_refused_ends_with_bad_input(b2b, tmp_path, policy_text, says):
    policy = tmp_path / "p.yaml"
    if policy_text is not None:
        policy.write_text(policy_text, encoding="utf-8")
    r = invoke("gate", "--baseline", b2b, "--candidate", b2b, "--policy", policy, "-o", tmp_path / "g")
    assert r.exit_code == 2, r.output
    assert says in r.output
    assert tail(r.output)[0].startswith("Gate: bad input (exit 2: bad input): nothing was gated"), r.output


def test_a_gate_on_an_incomplete_run_ends_with_bad_input(b2b, tmp_path):
    """An evidence refusal (raised as the harness's own error, not the gate's usage error)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cand = tmp_path / "cand"
    shutil.copytree(b2b, cand)
    for part in (cand / "traces").glob("*.parquet"):  # a session's rows gone, as from a killed run
        t = pq.read_table(part)
        pq.write_table(t.filter(pc.not_equal(t["session_id"], t["session_id"][0])), part)
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - {metric: recall@10, max_drop: 0.02}\n", encoding="utf-8")
    r = invoke("gate", "--baseline", b2b, "--candidate", cand, "--policy", policy, "-o", tmp_path / "g")
    assert r.exit_code == 2, r.output
    assert tail(r.output)[0].startswith("Gate: bad input (exit 2: bad input): nothing was gated"), r.output


def test_compare_ends_with_the_arms_that_differ_significantly(b2b, tmp_path):
    r = invoke("compare", b2b, "--reference", "original", "-m", "recall@10", "-s", "all", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    last = tail(r.output)[0]
    assert last.startswith("compare: 6 of 7 arms differ significantly from original (Holm p < 0.05): "), last
    assert "rewrite rules (recall@10 +0.414 better)" in last and "not significantly: concat" in last, last
    r = invoke("compare", b2b, b2b, "-m", "recall@10", "-s", "all", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert tail(r.output)[0] == ("compare: no arm differs significantly from b2b (Holm p < 0.05); 8 arms compared, "
                                 "all 8 unchanged"), r.output
