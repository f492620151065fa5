"""The typed run record (issue 27): one manifest model with its schema_version, built by
harness/store/manifest.py for replays, imported runs and merged shards, read through its fields; an
older manifest upgraded by one function (tested on a copy of the committed baseline's manifest,
written before the model)."""
import json
import shutil

import pytest

from harness.errors import BadInput
from harness.store.folder import RunFolder, RunFolderError
from harness.store.record import SCHEMA_VERSION, parse, upgrade
from tests.conftest import ROOT

BASELINE = ROOT / "runs/baselines/b2b"


def test_the_committed_baselines_manifest_is_upgraded(tmp_path):
    raw = json.loads((BASELINE / "manifest.json").read_text(encoding="utf-8"))
    assert "schema_version" not in raw and raw["index"]["qdrant"] == ":memory:"  # written before the model
    up = upgrade(raw)
    assert up["schema_version"] == SCHEMA_VERSION and "qdrant" not in up["index"]
    assert up["index"]["qdrant_url"] is None and "local mode" in up["index"]["dense"]
    m = parse(raw, "manifest.json")
    assert (m.run_id, m.status, m.repeats, m.eval_set.name) == (raw["run_id"], "complete", 1, "b2b-shop")
    assert [a["arm_id"] for a in m.arms] == [a["arm_id"] for a in raw["arms"]]
    assert m.counts["turns"] == raw["counts"]["turns"] and isinstance(m.counts["turns"], int)
    run = tmp_path / "b2b"
    shutil.copytree(BASELINE, run)
    folder = RunFolder(run)
    folder.write_manifest(folder.read_manifest())  # read, upgraded, written: the same record again
    again = folder.read_manifest()
    assert again == m and json.loads((run / "manifest.json").read_text())["schema_version"] == SCHEMA_VERSION


def test_a_manifest_with_a_wrong_field_is_named(tmp_path):
    run = tmp_path / "r"
    shutil.copytree(BASELINE, run)
    raw = json.loads((run / "manifest.json").read_text())
    raw["repeats"] = "twice"
    (run / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(RunFolderError, match=r"manifest.json: unreadable \(repeats: "):
        RunFolder(run).read_manifest()
    with pytest.raises(BadInput, match="not a JSON object"):
        parse([1, 2], "m.json")


def test_every_kind_of_run_writes_the_current_schema(tmp_path, tiny_set):
    """A replay (each shard of one), merged shards and an imported run file: all the current record."""
    import yaml

    from tests.evidence import invoke

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "t", "eval_set": str(tiny_set), "arms": ["original"],
                                   "runs_dir": str(tmp_path / "runs")}))
    for i in (0, 1):
        r = invoke("run", cfg, "--run-id", f"s{i}", "--shard", f"{i}/2", "--no-progress", "--no-metrics")
        assert r.exit_code == 0, r.output
        m = RunFolder(tmp_path / f"runs/s{i}").read_manifest()
        assert (m.schema_version, m.status, m.shard.index, m.shard.of) == (SCHEMA_VERSION, "complete", i, 2)
        assert m.machine is not None and m.index.dense.startswith("qdrant-edge")
    r = invoke("merge", tmp_path / "runs/s0", tmp_path / "runs/s1", "-o", tmp_path / "runs/m")
    assert r.exit_code == 0, r.output
    m = RunFolder(tmp_path / "runs/m").read_manifest()
    assert m.schema_version == SCHEMA_VERSION and m.shard is None and [x["shard"]["index"] for x in m.merged_from] == [0, 1]
    assert invoke("export", "trec", tmp_path / "runs/m", "--arm", "original", "-o", tmp_path / "o.run").exit_code == 0
    r = invoke("import", "run", tmp_path / "o.run", "--eval-set", tiny_set, "--runs-dir", tmp_path / "runs",
               "--run-id", "ext")
    assert r.exit_code == 0, r.output
    m = RunFolder(tmp_path / "runs/ext").read_manifest()
    assert (m.schema_version, m.status, m.config) == (SCHEMA_VERSION, "complete", {"imported_from": str(tmp_path / "o.run")})
