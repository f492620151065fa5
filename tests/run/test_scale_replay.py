"""A replay whose memory does not grow with the eval set (issue 45 item 2): a large eval set's
sessions read from their files on each pass instead of held as models, the replay's jobs made as
they are taken, the labels snapshot written in batches, and the synthetic eval set of N turns from
the b2b-shop catalogue (bench/synth_evalset.py). Sizes here are small: the files' size that decides
between held and read (KEEP_BYTES) and the labels' batch are set low, so the large-set paths run."""
from __future__ import annotations

import sys
import types

import pyarrow.parquet as pq
import pytest
import yaml

from harness.config import parse_config
from harness.evalset import sessions as sessions_mod
from harness.evalset.load import iter_labelled, load_eval_set
from harness.evalset.sessions import ChangedOnDisk
from harness.run import replay as replay_mod
from harness.store.equality import runs_equal
from harness.run.replay import Replay, labels_table
from harness.store.shard import in_shard
from tests.conftest import ROOT, TINY_DOCS, TINY_SESSIONS, write_set
from tests.evidence import invoke

sys.path.insert(0, str(ROOT / "bench"))
from synth_evalset import write_synthetic_evalset  # noqa: E402


def copies(n: int) -> list[dict]:
    return [{**s, "session_id": f"{s['session_id']}-{k}"} for k in range(n) for s in TINY_SESSIONS]


@pytest.fixture
def eight(tmp_path):
    return write_set(tmp_path / "eight", docs=TINY_DOCS, sessions=copies(4))


def test_a_large_set_is_read_per_pass_and_equals_the_set_held_in_memory(eight, monkeypatch):
    held = load_eval_set(eight)
    monkeypatch.setattr(sessions_mod, "KEEP_BYTES", 0)
    read = load_eval_set(eight)
    assert held.sessions.models is not None and read.sessions.models is None  # the files' size decides
    want = [s.model_dump() for s in held.sessions]
    assert [s.model_dump() for s in read.sessions] == want
    assert [s.model_dump() for s in read.sessions] == want  # every pass reads them again
    assert read.sessions[3].model_dump() == want[3] and [s.session_id for s in read.sessions[1:3]] == [
        s["session_id"] for s in want[1:3]]
    assert read.content_hash == held.content_hash and read.split_of == held.split_of
    keep = lambda sid: in_shard(sid, (1, 2))  # noqa: E731
    assert [(s.session_id, t) for s, _, t, _ in iter_labelled(read, None, keep)] == \
        [(s.session_id, t) for s, _, t, _ in iter_labelled(held, None, keep)]
    assert read.labelled_turns(None, keep) == sum(1 for _ in iter_labelled(held, None, keep)) > 0


def test_a_session_file_written_over_after_loading_is_refused(eight, monkeypatch):
    monkeypatch.setattr(sessions_mod, "KEEP_BYTES", 0)
    es = load_eval_set(eight)
    path = eight / "sessions.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    with pytest.raises(ChangedOnDisk, match="changed since the eval set was loaded"):
        list(es.sessions)


def test_the_labels_snapshot_in_batches_is_the_table(eight, tmp_path, monkeypatch):
    monkeypatch.setattr(replay_mod, "LABEL_BATCH", 5)
    es = load_eval_set(eight)
    from harness.store.folder import RunFolder

    (tmp_path / "r").mkdir()
    RunFolder(tmp_path / "r").write_labels(replay_mod.labels_batches(es, None))
    got = pq.read_table(tmp_path / "r" / "labels.parquet")
    assert pq.ParquetFile(tmp_path / "r" / "labels.parquet").metadata.num_row_groups > 1
    assert got.equals(labels_table(es, None)) and got.num_rows == 12


def test_jobs_are_made_as_the_replay_takes_them(eight, tmp_path):
    raw = {"name": "t", "eval_set": str(eight), "arms": ["original", "oracle"], "runs_dir": str(tmp_path / "runs")}
    rp = Replay(parse_config(raw), raw, run_dir=tmp_path / "r", progress=False)
    jobs = rp.jobs(index=None)
    assert isinstance(jobs, types.GeneratorType)  # no list of every turn's context
    assert sum(1 for _ in jobs) == rp.planned() == 12 * 2
    rp.shard = (0, 2)
    assert sum(1 for _ in rp.jobs(index=None)) == rp.planned() < 24


def test_a_replay_of_a_set_read_per_pass_equals_one_held_in_memory(eight, tmp_path, monkeypatch):
    """One process and two workers, the sessions read from their files and the labels in batches of 5."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "t", "eval_set": str(eight), "arms": ["original", "concat", "oracle"],
                                   "runs_dir": str(tmp_path / "runs")}), encoding="utf-8")
    assert invoke("run", cfg, "--run-id", "held", "--workers", 1, "--no-progress").exit_code == 0
    monkeypatch.setattr(sessions_mod, "KEEP_BYTES", 0)
    monkeypatch.setattr(replay_mod, "LABEL_BATCH", 5)
    for n in (1, 2):
        r = invoke("run", cfg, "--run-id", f"read{n}", "--workers", n, "--no-progress")
        assert r.exit_code == 0, r.output
        assert runs_equal(tmp_path / "runs/held", tmp_path / f"runs/read{n}") == []


def test_the_synthetic_set_has_exactly_n_turns_and_is_the_same_for_a_seed(tmp_path):
    a = write_synthetic_evalset(tmp_path / "a", 1001, seed=3)
    b = write_synthetic_evalset(tmp_path / "b", 1001, seed=3)
    es = load_eval_set(tmp_path / "a")
    assert a["turns"] == es.labelled_turns() == 1001 and a["sessions"] == len(es.sessions)
    assert set(es.split_of.values()) == {"main", "test"}  # each session in its original's split
    for name in ("sessions.jsonl", "sessions.test.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "embeddings").is_dir()  # the catalogue's shipped vectors: nothing to embed
