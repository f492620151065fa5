"""Session groups scored on several processes (issue 45). A group's per-turn rows are computed, spilled
and summed where it is scored; what comes back is small: the names of its metrics, the per-turn rows
the caller keeps, the files its aggregates and tables spilled, and its per-session sums. The caller
merges them in the groups' order, so every table is the one a single process gives (the same sums,
added in the same order; tests/metrics/test_scale_equal.py)."""
from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from harness.errors import Infrastructure
from harness.forking import leave_with_parent, start_method, usable_cores
from harness.metrics.aggregate import TurnSpill
from harness.metrics.groups import label_groups, score_group
from harness.store.record import Manifest
from harness.store.turns import categorical


@dataclass
class Inputs:
    """What every group's scoring reads, sent once to each worker: the run, the measures asked for,
    where the aggregates' rows spill, what takes each group's tables (None, or score.py's _Tables:
    `empty`, `close`, `merge`, called) and which metrics' per-turn rows the caller keeps."""

    run_dir: Path
    man: Manifest
    measures: list[str]
    spill: Path
    tables: Any
    keep: Callable[[str], bool] | None


@dataclass
class Job:
    """One session group: its sessions and trace files, its label rows and their positions in the
    run's labels, and (the first group only) every session id the labels name."""

    i: int
    sessions: list[str]
    parts: list[Path]
    labels: pd.DataFrame
    positions: np.ndarray
    known: set[str] | None


@dataclass
class Done:
    """One group scored: its metrics (in its kernels' order), the per-turn rows the caller keeps, its
    aggregate files (Aggregator.merge) and its tables to merge."""

    metrics: list[str]
    kept: pd.DataFrame
    agg_files: dict
    tables: Any = None


def score_one(inp: Inputs, job: Job) -> Done | None:
    """A group scored into fresh accumulators (None: no trace row or no metric)."""
    g = score_group(inp.run_dir, inp.man, job.labels, job.sessions, job.parts, inp.measures, job.i == 0,
                    np.ones(len(job.labels), bool), job.known if job.known is not None else set())
    if g is None or g.per_turn is None:
        return None
    spill = TurnSpill(job.labels, job.positions, inp.spill, f"g{job.i:05d}-")
    spill.add(g.per_turn)
    tables = inp.tables.empty(f"g{job.i:05d}-") if inp.tables is not None else None
    if tables is not None:
        tables(g)
        tables.close()
    kept = g.per_turn if inp.keep is None else categorical(g.per_turn[g.per_turn["metric"].isin(
        [m for m in g.metrics if inp.keep(m)])])
    return Done(g.metrics, kept, spill.files, tables)


def jobs(labels: pd.DataFrame, gp: list[tuple[list[str], list[Path]]]) -> Iterator[Job]:
    """The groups of `gp` (group_parts') as jobs, each with its label rows (found once for all)."""
    of_row = label_groups(labels, [s for s, _ in gp])
    order = np.argsort(of_row, kind="stable")
    bounds = np.searchsorted(of_row[order], np.arange(len(gp) + 1))
    for i, (sessions, parts) in enumerate(gp):
        pos = order[bounds[i]:bounds[i + 1]]
        yield Job(i, sessions, parts, labels.iloc[pos], pos,
                  set(labels["session_id"].astype(str)) if i == 0 else None)


class ScoringWorkerDied(Infrastructure):
    """A process scoring session groups died (killed, out of memory): exit 3, the run untouched."""


def default_workers() -> int:
    """Processes that score a run's session groups unless told: the cores this process may use."""
    return usable_cores()


_INPUTS: Inputs | None = None  # a worker's, set once when it starts


def _start(inp: Inputs, parent: int) -> None:
    global _INPUTS
    _INPUTS = inp
    leave_with_parent(parent)  # a killed parent's pool would wait on its queue for ever


def _task(job: Job) -> Done | None:
    return score_one(_INPUTS, job)


@contextmanager
def pool(inp: Inputs, workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """`workers` processes (forked where that is safe, else spawned: harness.forking), each sent `inp`
    once; None for one worker (everything here)."""
    if workers <= 1:
        yield None
        return
    with ProcessPoolExecutor(workers, mp_context=mp.get_context(start_method()), initializer=_start,
                             initargs=(inp, os.getpid())) as ex:
        try:
            yield ex
        except BaseException as e:
            ex.shutdown(wait=False, cancel_futures=True)  # the groups not started are dropped, not scored
            if isinstance(e, BrokenProcessPool):
                raise ScoringWorkerDied(f"a process scoring session groups died ({e}); nothing was written. Out "
                                        "of memory? Score with fewer workers (`harness metrics RUN --workers 1`)") from None
            raise


def scored_groups(ex: ProcessPoolExecutor | None, inp: Inputs, labels: pd.DataFrame,
                  gp: list[tuple[list[str], list[Path]]], workers: int = 1) -> Iterator[Done | None]:
    """Every group scored, in order: here one after another (no pool), else on the pool's `workers`,
    each sent its group's label rows only, at most two per worker sent before their turn to be
    merged (so the jobs in flight, not the run, bound what waits here)."""
    if ex is None:
        yield from (score_one(inp, job) for job in jobs(labels, gp))
        return
    ahead = 2 * max(workers, 2)
    pending: deque = deque()
    for job in jobs(labels, gp):
        pending.append(ex.submit(_task, job))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
