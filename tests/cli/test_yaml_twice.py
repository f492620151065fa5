"""Issue 42, build item 4: a key written twice in a YAML file of ours is an error naming file and
line wherever the file is read (run configs, gate policies, serve scripts, eval-set info, price
tables, judge configs, the CI script's read of the config), never the later value silently kept:
a policy with `rules:` twice kept only the later, empty one and gated the floor alone."""
import pytest

from harness.analysis.policy import load_policy
from harness.config import load_config
from harness.errors import BadInput
from harness.evalset.load import load_eval_set
from harness.llm.ledger import load_prices
from harness.steps.judge import judge_endpoint
from harness.testing.script import load_script
from tests.e2e.test_ci_gate_script import git, run_script, scratch
from tests.evidence import BASELINE, gate

TWICE = r":(\d+): {key}: written twice \(first on line (\d+)\)"


@pytest.mark.parametrize("load, text, key, line", [
    (load_policy, "rules:\n  - {metric: recall@10, max_drop: 0.02}\nfloors: []\nrules: []\n", "rules", 4),
    (load_config, "name: x\neval_set: eval_sets/b2b-shop\narms: [original]\narms: [concat]\n", "arms", 4),
    (load_script, "latency: 0.001\nrules:\n  - {role: rewrite, reply: {queries: [a]}, reply: {queries: [b]}}\n",
     "reply", 3),
    (load_prices, "gpt-x: {input: 1.0, output: 2.0}\ngpt-x: {input: 0.0, output: 0.0}\n", "gpt-x", 2),
    (lambda p: judge_endpoint(None, None, config=p), "kind: openai-compatible\nmodel: a\nmodel: b\n", "model", 3),
])
def test_a_key_written_twice_is_refused_with_file_and_line(tmp_path, load, text, key, line):
    p = tmp_path / "file.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput, match=r"file\.yaml" + TWICE.format(key=key)) as e:
        load(p)
    assert f"file.yaml:{line}: {key}: written twice" in str(e.value)


def test_an_eval_set_info_with_a_key_twice_is_refused(tmp_path):
    root = tmp_path / "set"
    root.mkdir()
    (root / "eval_set.yaml").write_text("name: a\nversion: '1'\nname: b\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"eval_set\.yaml:3: .*name.*written twice \(first on line 1\)"):
        load_eval_set(root)


def test_a_policy_with_rules_twice_is_bad_input_not_a_floor_only_pass(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("rules:\n  - {metric: recall@10, max_drop: 0.02}\nfloors:\n  - {metric: entitlement_violations, "
                 "max: 0}\nrules: []\n", encoding="utf-8")
    r = gate(tmp_path / "g", BASELINE, BASELINE, p)
    assert r.exit_code == 2 and "policy.yaml:5: rules: written twice (first on line 1)" in r.output, r.output


def test_the_ci_script_refuses_a_base_config_with_a_key_twice(tmp_path):
    repo, _ = scratch(tmp_path, "rules:\n  - {metric: recall@10, max_drop: 0.02}\n")
    (repo / "configs/prompt-gate.yaml").write_text("name: prompt-gate\neval_set: eval_sets/tiny\neval_set: elsewhere\n")
    git(repo, "commit", "-qam", "a config with eval_set twice")
    base = git(repo, "rev-parse", "HEAD")
    p, calls, summary = run_script(tmp_path, repo, base, "replay")
    assert p.returncode == 2 and calls == [], p.stdout + p.stderr
    assert "prompt-gate.yaml:3: eval_set: written twice (first on line 2)" in summary
