"""Issue 42, build item 4 (part): every number a gate policy holds is finite; .inf and .nan are
bad input naming file, line and field, never a pass or a regression. A floor or budget on a
metric the candidate no longer measures fails, an infinite value is named (items 4, 7), and a
relative rule on an operational metric is refused (item 7)."""
import json

import numpy as np
import pytest

from harness.analysis.policy import GateUsageError, load_policy
from harness.metrics.kernel import LATENCY
from tests.evidence import BASELINE, copy_run, gate, invoke, manifest, traces, write_traces


@pytest.mark.parametrize("check", [
    "rules: [{metric: recall@10, max_drop: .inf}]",
    "rules: [{metric: recall@10, max_drop: .nan}]",
    "floors: [{metric: recall@10, min: .nan}]",
    "budgets: [{metric: latency_total_ms, stat: p95, max: .nan}]",
])
def test_policy_numbers_are_finite(tmp_path, check):
    p = tmp_path / "policy.yaml"
    p.write_text(check + "\n")
    with pytest.raises(GateUsageError, match=r"policy\.yaml:1: .*finite"):
        load_policy(p)


@pytest.mark.parametrize("check, said", [
    ("rules: [{metric: recall@10, max_drop: 5}]",
     "rules.0.max_drop: recall@10 lies in [0, 1]: no change can be worse than −1, so max_drop 5 would pass every "
     "change"),
    ("rules: [{metric: ndcg@10, max_drop: 1e308}]", "rules.0.max_drop: ndcg@10 lies in [0, 1]"),
    ("floors: [{metric: identifier_preservation, min: -0.5}]",
     "floors.0.min: identifier_preservation lies in [0, 1]: min -0.5 lies outside it, so the check could never fail"),
    ("budgets: [{metric: cost_usd, max: -1}]",
     "budgets.0.max: cost_usd lies in [0, inf]: max -1 lies outside it, so the check could never pass"),
])
def test_policy_numbers_are_in_their_metrics_range(tmp_path, check, said):
    """Finite but out of range: a margin no change can exceed passed a recall −0.63 candidate."""
    p = tmp_path / "policy.yaml"
    p.write_text(check + "\n")
    with pytest.raises(GateUsageError) as e:
        load_policy(p)
    assert f"policy.yaml:1: {said}" in str(e.value)


# --- issue 42, items 4 and 7: bounds on what the candidate no longer measures, operational rules ---



def _latency(tmp_path, value: float, first_turns_only: bool = False):
    """A copy of the baseline whose `rewrite` arm's timings are all `value` (NaN: not measured)."""
    cand = copy_run(tmp_path / "cand")
    t = traces(cand)
    sel = t["arm_id"] == next(a["arm_id"] for a in manifest(cand)["arms"] if a["label"] == "rewrite")
    if first_turns_only:
        sel &= t["turn_index"] == 1
    t.loc[sel, list(LATENCY)] = value
    write_traces(cand, t)
    assert invoke("metrics", cand).exit_code == 0
    return cand


def _budget(tmp_path, cand) -> dict:
    r = gate(tmp_path / "g", BASELINE, cand)
    assert r.exit_code == 1, r.output
    v = json.loads((tmp_path / "g/gate.json").read_text())
    failed = [x for x in v["results"] if x["status"] != "pass" and x["status"] != "n/a"]
    assert [x["name"] for x in failed] == ["budget 2: p95 latency_total_ms rewrite"], failed
    return failed[0]


def test_a_budget_on_a_metric_the_candidate_stopped_measuring_fails(tmp_path):
    x = _budget(tmp_path, _latency(tmp_path, np.nan))
    assert x["status"] == "fail" and "cand's rewrite no longer measures latency_total_ms: 204 of 204 turns" in x["detail"]


def test_a_budget_on_turns_the_candidate_stopped_measuring_fails(tmp_path):
    x = _budget(tmp_path, _latency(tmp_path, np.nan, first_turns_only=True))
    assert "50 of 204 turns the baseline measured have no latency_total_ms value in cand" in x["detail"]


def test_an_infinite_latency_is_named_infinite(tmp_path):
    x = _budget(tmp_path, _latency(tmp_path, np.inf))
    assert "204 turn(s) hold an infinite latency_total_ms (+inf" in x["detail"] and "nan" not in x["detail"]


def test_a_relative_rule_on_an_operational_metric_is_refused(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("rules:\n  - {metric: recall@10, max_drop: 0.02}\n  - {metric: latency_total_ms, max_drop: 1}\n")
    with pytest.raises(GateUsageError, match=r"policy\.yaml:3: rules\.1\.metric: latency_total_ms is an operational "
                                             r"metric: operational metrics take absolute budgets"):
        load_policy(p)
    r = gate(tmp_path / "g", BASELINE, BASELINE, p)  # two runs of the same code: 1 ms of noise is no regression
    assert r.exit_code == 2 and "operational metrics take absolute budgets" in r.output, r.output
