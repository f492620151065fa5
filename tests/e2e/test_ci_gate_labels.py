"""The eval set comes from the base (issue 42, wrong verdict 3): scripts/eval_gate.sh replays both
runs on the base commit's eval set, so a pull request that deletes qrels is judged by the labels it
deleted, and the summary shows the change; locally, `harness gate` names the eval-set files that
differ between two runs. The script is driven here with the real harness on a scratch repository
holding a copy of eval_sets/b2b-shop (two commits: the base, and the pull request)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from harness.cli import app
from harness.evalset.folder import CORPUS, EMBEDDINGS, FILES, SPLIT_FILES
from harness.evalset.load import load_eval_set
from tests.conftest import ROOT, TINY_SESSIONS, write_set
from tests.e2e.test_ci_gate_script import git

B2B = ROOT / "eval_sets/b2b-shop"
CONFIG = "name: gate\neval_set: {eval_set}\narms: [{arm}]\nruns_dir: runs\n"
# a regression test on all turns: concat loses on the follow-ups, and wins on the first turns
POLICY = "pairs: {rewrite: concat}\nrules:\n  - {metric: recall@10, segment: all, max_drop: 0.02, test: regression}\n"


def without_follow_up_qrels(es: Path) -> int:
    """Delete the qrels of every turn after the first in `es`; the number of turns whose qrels went."""
    n = 0
    for name in SPLIT_FILES.values():
        rows = [json.loads(x) for x in (es / name).read_text(encoding="utf-8").splitlines()]
        for s in rows:
            for t in s["turns"][1:]:
                n += bool(t.get("labels", {}).pop("qrels", None))
        (es / name).write_text("".join(json.dumps(s) + "\n" for s in rows), encoding="utf-8")
    return n


def pull_request(tmp_path: Path, delete_qrels: bool, eval_set: str = "eval_sets/b2b-shop") -> tuple[Path, str]:
    """A repository whose base commit replays `rewrite` on b2b-shop and whose head commit replays
    `concat` (and, with `delete_qrels`, deletes the follow-up turns' qrels); both configs name the
    eval set as `eval_set`."""
    repo = tmp_path / "repo"
    es = repo / "eval_sets/b2b-shop"
    es.mkdir(parents=True)
    (repo / "configs").mkdir()
    for name in (*FILES, EMBEDDINGS):
        (shutil.copytree if (B2B / name).is_dir() else shutil.copy)(B2B / name, es / name)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("runs/\nreports/\n.cache/\n")
    (repo / "configs/prompt-gate.yaml").write_text(CONFIG.format(arm="rewrite", eval_set=eval_set))
    (repo / "configs/prompt-gate-policy.yaml").write_text(POLICY)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "configs/prompt-gate.yaml").write_text(CONFIG.format(arm="concat", eval_set=eval_set))
    if delete_qrels:
        assert without_follow_up_qrels(es) == 154
    git(repo, "commit", "-qam", "the pull request")
    return repo, base


def gate_script(tmp_path: Path, repo: Path, base: str):
    summary = tmp_path / "summary.md"
    env = {**os.environ, "BASE": base, "MODE": "replay", "HARNESS": str(Path(sys.executable).parent / "harness"),
           "PYTHON": sys.executable, "BASE_DIR": str(tmp_path / "base"), "GITHUB_STEP_SUMMARY": str(summary),
           "HARNESS_EMBEDDING_CACHE": str(tmp_path / "embeddings"), "PYTHONPATH": str(ROOT)}
    p = subprocess.run(["bash", str(ROOT / "scripts/eval_gate.sh")], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=300)
    return p, summary.read_text(encoding="utf-8") if summary.exists() else ""


def test_a_pull_request_that_deletes_qrels_is_gated_on_the_base_labels(tmp_path):
    out = {}
    for delete in (False, True):
        where = tmp_path / ("deletes" if delete else "keeps")
        repo, base = pull_request(where, delete)
        out[delete] = (where, repo, *gate_script(where, repo, base))
    # the old script: 1 without the deletion, 0 with it (both runs scored with the pull request's labels)
    assert {d: o[2].returncode for d, o in out.items()} == {False: 1, True: 1}, out[True][2].stdout[-3000:]
    for delete, (where, repo, p, summary) in out.items():
        assert "rewrite → concat" in p.stdout and "regression recall@10 [all]" in p.stdout
        assert "compared on the baseline's 50 sessions, 204 turns, split(s)" in summary  # every turn has its qrels
        base_set = load_eval_set(where / "base/eval_sets/b2b-shop")
        for run in ("base", "pr"):  # both replayed the base commit's eval set, recorded as an override
            man = json.loads((repo / "runs" / run / "manifest.json").read_text())
            assert man["eval_set"]["hash"] == base_set.content_hash
            assert man["config"]["eval_set"] == str(where / "base/eval_sets/b2b-shop")
        if delete:
            assert ("this change edits the eval set `eval_sets/b2b-shop`: `eval_sets/b2b-shop/sessions.jsonl` "
                    "(changed), `eval_sets/b2b-shop/sessions.test.jsonl` (changed). It is gated on the base "
                    "commit's eval set (corpus, sessions, labels): the edit is not evaluated here") in summary
            assert CORPUS not in summary
            assert "labelled turns: 204 in the base, 204 here: 0 added, 0 removed" in summary
            assert "turns with qrels: 204 in the base, 50 here: 0 added, 154 removed" in summary
        else:
            assert "edits the eval set" not in summary



def test_an_eval_set_spelled_from_the_config_folder_is_the_base_commits_too(tmp_path):
    """`eval_set: ../eval_sets/b2b-shop` (the spelling the harness asks for: a config's paths are read
    from its folder) names the same folder. The old script took it for a path outside the repository:
    each run read its own commit's eval set, and the gate refused two eval sets instead of judging."""
    repo, base = pull_request(tmp_path, True, eval_set="../eval_sets/b2b-shop")
    p, summary = gate_script(tmp_path, repo, base)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]  # the regression, on the base's labels
    assert "compared on the baseline's 50 sessions, 204 turns, split(s)" in summary
    assert "is not part of the base commit" not in summary
    assert "`eval_sets/b2b-shop/sessions.jsonl` (changed)" in summary and "gated on the base commit's" in summary
    assert "turns with qrels: 204 in the base, 50 here: 0 added, 154 removed" in summary
    for run in ("base", "pr"):
        man = json.loads((repo / "runs" / run / "manifest.json").read_text())
        assert man["config"]["eval_set"] == str(tmp_path / "base/eval_sets/b2b-shop")

def run_tiny(tmp_path: Path, es: Path, run_id: str) -> Path:
    cfg = tmp_path / f"{run_id}.yaml"
    cfg.write_text(f"name: t\neval_set: {es}\narms: [original]\nruns_dir: {tmp_path / 'runs'}\n")
    r = CliRunner().invoke(app, ["run", str(cfg), "--run-id", run_id, "--quiet"])
    assert r.exit_code == 0, r.output
    return tmp_path / "runs" / run_id


def test_the_gate_names_the_eval_set_files_that_differ(tmp_path):
    es = write_set(tmp_path / "tiny")
    base = run_tiny(tmp_path, es, "base")
    sessions = es / SPLIT_FILES["main"]
    sessions.write_text(sessions.read_text().replace('"d2": 1', '"d2": 2'))
    cand = run_tiny(tmp_path, es, "cand")
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - {metric: recall@10, max_drop: 0.02}\n")
    args = ["gate", "--baseline", str(base), "--candidate", str(cand), "--policy", str(policy), "-o", str(tmp_path / "g")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    flat = " ".join(r.output.split())
    assert f"the eval-set files that differ: {SPLIT_FILES['main']} (changed);" in flat
    man = json.loads((cand / "manifest.json").read_text())
    del man["eval_set"]["files"]  # a manifest written before per-file hashes were recorded
    (cand / "manifest.json").write_text(json.dumps(man))
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "the eval-set hash differs (per-file hashes not recorded)" in " ".join(r.output.split())


def test_eval_set_option_must_name_an_eval_set_folder(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\neval_set: {write_set(tmp_path / 'tiny')}\narms: [original]\nruns_dir: {tmp_path}\n")
    r = CliRunner().invoke(app, ["run", str(cfg), "--eval-set", str(tmp_path / "nowhere"), "--quiet"])
    assert r.exit_code == 2 and "--eval-set" in r.output and "not an eval-set folder" in r.output


def test_the_verdict_counts_the_turns_with_qrels(tmp_path):
    sessions = json.loads(json.dumps(TINY_SESSIONS))
    del sessions[0]["turns"][1]["labels"]["qrels"]
    es = write_set(tmp_path / "tiny", sessions=sessions)
    base, cand = run_tiny(tmp_path, es, "base"), run_tiny(tmp_path, es, "cand")
    policy = tmp_path / "policy.yaml"
    policy.write_text("min_sessions: 2\nrules:\n  - {metric: recall@10, max_drop: 0.5}\n")
    CliRunner().invoke(app, ["gate", "--baseline", str(base), "--candidate", str(cand), "--policy", str(policy),
                             "-o", str(tmp_path / "g")])
    md = " ".join((tmp_path / "g/gate.md").read_text().split())
    assert "compared on the baseline's 2 sessions, 3 turns (2 with a relevant document in their qrels)" in md
