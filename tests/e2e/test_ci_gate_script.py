"""The CI gate (issue 26, observation 8): .github/workflows/eval-gate.yml runs scripts/eval_gate.sh,
which gates with the BASE commit's policy (a pull request that empties `rules:` is still judged by
the rules it removed, and the summary shows the edit), takes the merge base with the default branch
as baseline when run by hand, and ends "not gated" (exit 4, not 2) when a prompt changed and no key
is there. The script runs here in a scratch repository with a stand-in for the harness command
that records how it was called."""
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT, write_set

STUB = """#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
case "$1" in run) exit "${STUB_RUN_EXIT:-0}" ;; gate) exit "${STUB_GATE_EXIT:-0}" ;; esac
"""
RULES = "rules:\n  - {metric: recall@10, max_drop: 0.02}\n"


def git(repo: Path, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def scratch(tmp_path: Path, policy_after: str) -> tuple[Path, str]:
    """A repository whose base commit has a policy with a rule and whose head commit changes it."""
    repo = tmp_path / "repo"
    (repo / "configs").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    (repo / "configs/prompt-gate.yaml").write_text("name: prompt-gate\neval_set: eval_sets/tiny\n")
    write_set(repo / "eval_sets/tiny")
    (repo / "configs/prompt-gate-policy.yaml").write_text(RULES)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "configs/prompt-gate-policy.yaml").write_text(policy_after)
    git(repo, "commit", "-q", "--allow-empty", "-am", "the pull request")
    return repo, base


def run_script(tmp_path: Path, repo: Path, base: str, mode: str, key: str = "", **env):
    stub = tmp_path / "harness"
    stub.write_text(STUB)
    stub.chmod(0o755)
    summary = tmp_path / "summary.md"
    e = {**os.environ, "BASE": base, "MODE": mode, "HARNESS": str(stub), "BASE_DIR": str(tmp_path / "base"),
         "PYTHON": sys.executable, "STUB_LOG": str(tmp_path / "calls.log"), "GITHUB_STEP_SUMMARY": str(summary),
         "OPENAI_API_KEY": key, **env}
    p = subprocess.run(["bash", str(ROOT / "scripts/eval_gate.sh")], cwd=repo, env=e, capture_output=True, text=True,
                       timeout=60)
    calls = (tmp_path / "calls.log").read_text().splitlines() if (tmp_path / "calls.log").exists() else []
    return p, calls, summary.read_text() if summary.exists() else ""


def test_a_pull_request_that_empties_the_rules_is_gated_by_the_base_policy(tmp_path):
    repo, base = scratch(tmp_path, "rules: []\nfloors: []\nbudgets: []\n")
    p, calls, summary = run_script(tmp_path, repo, base, "replay", STUB_GATE_EXIT="1")
    assert p.returncode == 1, p.stdout + p.stderr  # the gate's own exit code
    gate = [c for c in calls if c.startswith("gate ")]
    assert gate and f"--policy {tmp_path / 'base'}/configs/prompt-gate-policy.yaml" in gate[0]
    assert (tmp_path / "base/configs/prompt-gate-policy.yaml").read_text() == RULES
    assert "gated by the base commit's policy" in summary and "-  - {metric: recall@10" in summary
    runs = [c for c in calls if c.startswith("run ")]
    assert runs[0].startswith(f"run {tmp_path / 'base'}/configs/prompt-gate.yaml --run-id base")
    assert runs[1].startswith("run configs/prompt-gate.yaml --run-id pr") and "--llm-cache replay" in runs[1]
    assert all(f"--eval-set {tmp_path / 'base'}/eval_sets/tiny " in r for r in runs)  # the base commit's eval set


def test_a_prompt_change_without_a_key_is_not_gated_and_not_a_verdict(tmp_path):
    repo, base = scratch(tmp_path, RULES)
    p, calls, summary = run_script(tmp_path, repo, base, "readwrite", key="")
    assert p.returncode == 4, p.stdout + p.stderr
    assert calls == []  # nothing ran, nothing was judged
    assert "not gated (no OPENAI_API_KEY)" in summary and "not a verdict" in summary
    p, calls, _ = run_script(tmp_path, repo, base, "readwrite", key="sk-test")
    assert p.returncode == 0 and [c.split()[0] for c in calls] == ["run", "run", "gate"]


def test_failed_turns_in_a_run_reach_the_gate_and_a_run_that_cannot_finish_stops(tmp_path):
    repo, base = scratch(tmp_path, RULES)
    p, calls, _ = run_script(tmp_path, repo, base, "replay", STUB_RUN_EXIT="1")
    assert p.returncode == 0 and [c.split()[0] for c in calls] == ["run", "run", "gate"]
    (tmp_path / "calls.log").unlink()
    p, calls, _ = run_script(tmp_path, repo, base, "replay", STUB_RUN_EXIT="3")
    assert p.returncode == 3 and [c.split()[0] for c in calls] == ["run"]


def test_the_workflow_takes_its_baseline_from_the_base_and_runs_the_script():
    wf = yaml.safe_load((ROOT / ".github/workflows/eval-gate.yml").read_text())
    steps = wf["jobs"]["gate"]["steps"]
    text = "\n".join(str(s.get("run", "")) for s in steps)
    assert "bash scripts/eval_gate.sh" in text
    assert 'merge-base "origin/$DEFAULT_BRANCH" HEAD' in text  # run by hand: the merge base, never the commit itself
    assert "github.sha" not in (ROOT / ".github/workflows/eval-gate.yml").read_text()
    assert "harness gate" not in text  # the gate runs inside the script, with the base policy
