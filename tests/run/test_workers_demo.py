"""`--workers 2` equals `--workers 1` on the demo sets (issue 28): the handbook demo config whole
(every arm, the corrective loop's grid included) and the mtrag-un demo config on its test split
(every arm, 174 conversations), as `harness run` runs them, over the shipped embedding caches.
The b2b demo config is covered by tests/run/test_workers.py's config slice (all 204 turns)."""
from __future__ import annotations

import pytest
import yaml

from harness.store.folder import RunFolder
from tests.conftest import ROOT
from tests.run.test_workers import with_one_and_two_workers


@pytest.mark.parametrize("name, splits, turns", [("handbook", None, 73), ("mtrag", ["test"], 174)])
def test_a_demo_config_with_two_workers_equals_one_process(tmp_path, name, splits, turns):
    raw = yaml.safe_load((ROOT / f"configs/{name}.yaml").read_text(encoding="utf-8"))
    raw.update(eval_set=str((ROOT / "configs" / raw["eval_set"]).resolve()), runs_dir=str(tmp_path / "runs"))  # from the config's folder
    if splits:
        raw["splits"] = splits
    w1, w2 = with_one_and_two_workers(raw, tmp_path)
    m1, m2 = RunFolder(w1).read_manifest(), RunFolder(w2).read_manifest()
    assert m2.workers == 2 and m1.counts["turns"] == m2.counts["turns"] == turns * len(m1.arms)
    assert m1.counts["turns_failed"] == m2.counts["turns_failed"] == 0
