"""`--workers 2` equals `--workers 1` on the demo sets (issue 28): the handbook demo config whole
(every arm, the corrective loop's grid included) and the mtrag-un demo config on its test split
(every arm, 174 conversations), as `harness run` runs them, over the shipped embedding caches.
The b2b demo config is covered by test_workers.py's config slice (all 204 turns)."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from harness.run.equality import runs_equal
from harness.run.folder import RunFolder
from tests.conftest import ROOT
from tests.test_reliability_helpers import HARNESS


@pytest.mark.parametrize("name, splits, turns", [("handbook", None, 73), ("mtrag", ["test"], 174)])
def test_a_demo_config_with_two_workers_equals_one_process(tmp_path, name, splits, turns):
    raw = yaml.safe_load((ROOT / f"configs/{name}.yaml").read_text(encoding="utf-8"))
    raw.update(eval_set=str(ROOT / raw["eval_set"]), runs_dir=str(tmp_path / "runs"))
    if splits:
        raw["splits"] = splits
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    for n in (2, 1):
        r = subprocess.run([str(HARNESS), "run", str(path), "--workers", str(n), "--run-id", f"w{n}", "--no-progress"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Traceback" not in r.stderr
    w1, w2 = tmp_path / "runs/w1", tmp_path / "runs/w2"
    assert runs_equal(w1, w2) == []
    m1, m2 = RunFolder(w1).read_manifest(), RunFolder(w2).read_manifest()
    jobs = sum(1 for _ in RunFolder(w1).read_manifest().arms)
    assert m2.workers == 2 and m1.counts["turns"] == m2.counts["turns"] == turns * jobs
    assert m1.counts["turns_failed"] == m2.counts["turns_failed"] == 0
