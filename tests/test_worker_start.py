"""How a parallel run's workers start and end (harness.run.parallel, harness.run.shard_worker):
started before the run folder is made and told to go once it is; replaying without importing
pandas; leaving with their exit handlers run (the embedded engine's folder removed)."""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys

import pytest

from harness.run import parallel
from harness.run.equality import runs_equal
from harness.run.parallel import WORKERS_DIR
from tests.evidence import invoke
from tests.test_reliability_helpers import HARNESS
from tests.conftest import TINY_DOCS, write_set
from tests.test_workers import config, sessions


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    """The tiny set with 8 sessions, split over two workers (tests/test_workers.py's)."""
    return write_set(tmp_path_factory.mktemp("es") / "eight", docs=TINY_DOCS, sessions=sessions(4))


def test_workers_start_before_the_run_folder_is_made_and_replay_once_it_is(eight, tmp_path, monkeypatch):
    seen = []
    begin = parallel.ParallelRun._begin

    def watched(self):
        workers = [p for p in mp.active_children() if p.name.startswith("harness-worker-")]
        seen.append((len(workers), self.run_dir.exists()))
        return begin(self)

    monkeypatch.setattr(parallel.ParallelRun, "_begin", watched)
    cfg = config(tmp_path, eight)
    r = invoke("run", cfg, "--run-id", "w2", "--workers", 2, "--no-progress")
    assert r.exit_code == 0, r.output
    assert seen == [(2, False)]  # both workers were started, and the folder was not made yet
    monkeypatch.undo()
    assert invoke("run", cfg, "--run-id", "w1", "--workers", 1, "--no-progress").exit_code == 0
    assert runs_equal(tmp_path / "runs/w1", tmp_path / "runs/w2") == []


def test_a_folder_that_exists_is_refused_before_any_worker_starts(eight, tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(parallel._Workers, "start", lambda self: started.append(self))
    cfg = config(tmp_path, eight)
    (tmp_path / "runs/taken").mkdir(parents=True)
    r = invoke("run", cfg, "--run-id", "taken", "--workers", 2, "--no-progress")
    assert r.exit_code == 2 and "exists" in r.output, r.output
    assert started == [] and not (tmp_path / "runs/taken" / WORKERS_DIR).exists()


def test_workers_leave_no_engine_folder_behind(eight, tmp_path):
    """A worker ends without tearing the interpreter down (harness.run.shard_worker.leave): the
    embedded engine's temporary folder, removed when the index is freed or by an exit handler,
    is gone when the run ends."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    r = subprocess.run([str(HARNESS), "run", str(config(tmp_path, eight)), "--workers", "2", "--run-id", "w2",
                        "--no-progress", "--no-metrics"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "runs/w2/manifest.json").is_file()
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("harness-edge-")) == []


WRITE_TRACES = """
import sys
{call}
from harness.run.traces import rows_to_table, row, TurnKey
from harness.arms.base import ArmResult
import pyarrow.parquet as pq
key = TurnKey(run_id="r", arm_id="a", arm="a", params={{}}, repeat=0, session_id="s", turn_index=0, query_type=None,
              language=None, domain=None, round=1, is_final=True, original_query="q", backend={{}})
pq.write_table(rows_to_table([row(key, ArmResult())]), sys.argv[1])
print("pandas" in sys.modules)
import pyarrow as pa
print(type(pa.table({{"a": [1]}}).to_pandas()).__name__)
"""


def test_a_worker_writes_trace_rows_without_importing_pandas(tmp_path):
    """pyarrow imports pandas on its first array from Python values (to ask whether they are a
    pandas object); a worker tells it pandas is not there, and a DataFrame still works after."""
    out = {}
    for name, call in (("worker", "from harness.run.shard_worker import pyarrow_without_pandas\n"
                                  "pyarrow_without_pandas()"), ("plain", "")):
        r = subprocess.run([sys.executable, "-c", WRITE_TRACES.format(call=call), str(tmp_path / f"{name}.parquet")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        out[name] = r.stdout.split()
    assert out["worker"] == ["False", "DataFrame"]
    assert out["plain"] == ["True", "DataFrame"]  # what the worker is spared
