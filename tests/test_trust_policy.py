"""Issue 42, build item 4 (part): every number a gate policy holds is finite; .inf and .nan are
bad input naming file, line and field, never a pass or a regression."""
import pytest

from harness.analysis.policy import GateUsageError, load_policy


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
