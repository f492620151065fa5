"""Aggregates of per-turn metric values per (arm, metric, segment): the mean over measured turns
(repeats first averaged per turn), p50, p95, the counts of measured and unmeasured turns and of
sessions, and the between-repeat spread. Unmeasured turns are counted beside the mean, never
averaged in as 0."""
from __future__ import annotations

import math
from concurrent.futures import Executor
from pathlib import Path

import numpy as np
import pandas as pd

from harness.metrics.segments import Segment, TurnLookup
from harness.store.folder import AGG_COLUMNS


def turn_values(per_turn: pd.DataFrame, by=("arm_id", "session_id", "turn_index"), sort: bool = False) -> pd.DataFrame:
    """Each turn's value per `by` group (columns `by` and value): its repeats averaged (NaN-skipping),
    turns with no measured repeat left out (unmeasured is not zero)."""
    t = per_turn.assign(value=pd.to_numeric(per_turn["value"], errors="coerce"))
    return t.groupby(list(by), sort=sort)["value"].mean().dropna().reset_index()


def pair_codes(a, b) -> np.ndarray:
    """Codes of the pairs of two columns' values in order of first appearance (pd.factorize of the
    pairs, without a tuple per row)."""
    ca, _ = pd.factorize(a)
    cb, ub = pd.factorize(b)
    return pd.factorize(ca.astype(np.int64) * (len(ub) + 1) + cb)[0]


def groups(codes: np.ndarray) -> list[np.ndarray]:
    """The rows of each group, ascending, groups in the order of their codes (pd.factorize's: the
    order of first appearance); none for no rows."""
    order = np.argsort(codes, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1) if len(order) else []


def _linear(s, q: float) -> float:
    """numpy's percentile of sorted values at fraction q ("linear" method), with numpy's own steps
    (index (n-1)q, lower index and weight, `_lerp`'s two forms around a weight of 0.5), so the
    result is the same float; `s` non-empty, in sorted order at least where it is read (the values
    at (n-1)q, the next and the last)."""
    n = len(s)
    v = (n - 1) * q
    lower = -1 if v >= n - 1 else math.floor(v)  # numpy marks an index at the last value -1
    a, b = float(s[lower]), float(s[-1 if lower == -1 else lower + 1])  # as Python floats (numpy scalars warn on inf - inf)
    g = v - lower
    d = b - a
    return b - d * (1 - g) if g >= 0.5 else a + d * g


def _quantiles(vals: np.ndarray) -> tuple[float, float]:
    """p50 and p95 of measured values (NaN when none), as pandas' Series.quantile computes them
    (numpy's linear interpolation, asked as percentiles): `np.percentile(vals, [50, 95])` without its
    set-up per call (a report has thousands of groups), equal to it float for float, signs of
    zero and NaN included (tested). The values `_linear` reads are put in their sorted places by
    one partition (linear time), the rest left unsorted."""
    if not len(vals):
        return np.nan, np.nan
    vals = np.asarray(vals, dtype=float)
    if np.isnan(vals).any() or (np.signbit(vals) & (vals == 0)).any():
        # a NaN (numpy's answer is NaN), or a -0.0 that numpy's partition of the values in their
        # order may place either side of an equal 0.0 where a sort would not: numpy's own percentile
        p50, p95 = np.percentile(vals, [50.0, 95.0])
        return float(p50), float(p95)
    n = len(vals)
    at = sorted({min(math.floor((n - 1) * q) + d, n - 1) for q in (0.5, 0.95) for d in (0, 1)} | {n - 1})
    part = np.partition(vals, at)  # part[i] for i in `at`: the i-th smallest value
    return float(_linear(part, 50.0 / 100)), float(_linear(part, 95.0 / 100))


def distinct(codes: np.ndarray) -> int:
    """How many distinct values non-negative integer codes hold (len(np.unique(codes)) without a sort)."""
    return int(np.count_nonzero(np.bincount(codes))) if len(codes) else 0


def _mean(vals: np.ndarray) -> float:
    """The mean of measured values as pandas' Series.mean takes it (numpy's pairwise sum over the
    count), without a Series per group."""
    return float(vals.sum() / len(vals))


class TurnSpill:
    """One session group's per-turn rows, as Aggregator reads them: each turn's value (repeats
    averaged), between-repeat spread, measured repeats and label row (its position in the run's
    labels, `positions` of the group's `labels`) in one temporary file named by `prefix`, each
    (arm, metric) a run of its rows (a file per (arm, metric) and group made 26,000 files a
    month). Written where the group is scored; its `files` go to Aggregator.merge."""

    def __init__(self, labels: pd.DataFrame, positions: np.ndarray, spill: Path, prefix: str):
        self.turns, self.positions = TurnLookup(labels), np.asarray(positions, np.int64)
        self.spill, self.prefix = Path(spill), prefix
        self.files: dict[tuple[str, str], list[tuple[Path, int, int]]] = {}  # (arm, metric) -> (file, first row, rows)

    def add(self, per_turn: pd.DataFrame) -> None:
        """The group's per-turn rows (compute_metrics' columns), fed once."""
        keys = ["arm_id", "metric", "session_id", "turn_index"]
        pt = per_turn.assign(value=pd.to_numeric(per_turn["value"], errors="coerce").astype(float))
        if pt.duplicated(keys).any():  # repeats: a turn's value is the mean of its measured repeats
            g = pt.groupby(keys, sort=False)
            pt = g["value"].agg(["mean", "std", "count"]).reset_index()
            pt = pt.rename(columns={"mean": "value", "std": "sd", "count": "nrep"})
        else:
            pt = pt.assign(sd=np.nan, nrep=(~np.isnan(pt["value"].to_numpy())).astype(float))
        at = self.turns.rows(pt["session_id"], pt["turn_index"])
        rows_of = np.where(at >= 0, self.positions[np.clip(at, 0, None)] if len(self.positions) else -1, -1)
        data = np.column_stack([pt["value"].to_numpy(float), pt["sd"].to_numpy(float), pt["nrep"].to_numpy(float),
                                rows_of.astype(float)])
        path, at = self.spill / f"agg-{self.prefix}{len(self.files):05d}.f8", 0
        with open(path, "wb") as f:  # one file, each (arm, metric) a run of rows in it
            for rows in groups(pair_codes(pt["arm_id"], pt["metric"])):
                key = (str(pt["arm_id"].iloc[rows[0]]), str(pt["metric"].iloc[rows[0]]))
                self.files[key] = [(path, at, len(rows))]
                data[rows].tofile(f)
                at += len(rows)


class Aggregator:
    """Aggregates per (arm, metric, segment) over per-turn rows spilled a session group at a time
    (TurnSpill, `merge`); `table` aggregates one (arm, metric) at a time. What stays in memory is
    one (arm, metric)'s turns (four floats a turn), not the run's per-turn table. Means over
    measured turns in the order fed (repeats: a turn's value is the mean of its measured repeats)."""

    def __init__(self, labels: pd.DataFrame, segments: list[Segment], spill: Path):
        self.names = [seg.name for seg in segments]
        self.masks = [seg.mask(labels).to_numpy(bool) for seg in segments]
        self.lsess = TurnLookup(labels).codes
        self.spill = Path(spill)
        self.files: dict[tuple[str, str], list[tuple[Path, int, int]]] = {}  # (arm, metric) -> (file, first row,
        # rows) of each group, in the order fed

    def merge(self, files: dict[tuple[str, str], list[tuple[Path, int, int]]]) -> None:
        """The files of the next session group's TurnSpill."""
        for key, paths in files.items():
            self.files.setdefault(key, []).extend(paths)

    def table(self, metrics: list[str], arms: list[str], pool: Executor | None = None, n: int = 1) -> pd.DataFrame:
        """Rows by segment (in the order given), then metric (`metrics`' order), then arm (`arms`'),
        whatever the session groups were. `pool`: where the (arm, metric)s are aggregated, in `n`
        runs of consecutive ones (None: here), each the same rows."""
        keys = list(self.files)
        runs = [[keys[i] for i in r] for r in np.array_split(np.arange(len(keys)), max(1, min(n, len(keys))))]
        got = list(pool.map(self.rows, runs)) if pool is not None and len(runs) > 1 else [self.rows(keys)]
        rank = {m: i for i, m in enumerate(metrics)}, {a: i for i, a in enumerate(arms)}
        out = sorted((((si, rank[0].get(r["metric"], len(rank[0])), rank[1].get(r["arm_id"], len(rank[1]))), r)
                      for part in got for si, r in part), key=lambda x: x[0])  # stable: ties keep their order
        return pd.DataFrame([r for _, r in out], columns=AGG_COLUMNS)

    def rows(self, keys: list[tuple[str, str]]) -> list[tuple[int, dict]]:
        """The aggregate rows of these (arm, metric)s, each with its segment's position."""
        out, seen = [], None  # label rows, their sessions and each segment's mask: most keys share their turns
        if not self.names:
            return out
        for arm_id, metric in keys:
            value, sd, nrep, li = np.concatenate([np.fromfile(p, np.float64, count=4 * n, offset=32 * at)
                                                  for p, at, n in self.files[(arm_id, metric)]]).reshape(-1, 4).T
            li, measured, has_sd = li.astype(np.int64), nrep > 0, ~np.isnan(sd)
            if seen is None or not np.array_equal(seen[0], li):
                at = np.clip(li, 0, None)
                seen = (li, self.lsess[at], [(li >= 0) & mask[at] for mask in self.masks])
            for si, seg in enumerate(self.names):
                keep = seen[2][si]
                n_rows = int(np.count_nonzero(keep))
                if not n_rows:
                    continue
                meas = keep & measured
                vals = value[meas]
                p50, p95 = _quantiles(vals)
                n_sd = int(np.count_nonzero(keep & has_sd))  # pandas' NaN-skipping mean: NaN as 0 in the sum
                out.append((si, {
                    "arm_id": arm_id, "metric": metric, "segment": seg, "mean": _mean(vals) if len(vals) else np.nan,
                    "p50": p50, "p95": p95, "n": len(vals), "n_unmeasured": n_rows - len(vals),
                    "n_sessions": distinct(seen[1][meas]),
                    "repeat_sd": float(np.where(has_sd, sd, 0.0)[keep].sum() / n_sd) if n_sd else np.nan}))
        return out
