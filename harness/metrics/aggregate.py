"""Aggregates of per-turn metric values per (arm, metric, segment): the mean over measured turns
(repeats first averaged per turn), p50, p95, the counts of measured and unmeasured turns and of
sessions, and the between-repeat spread. Unmeasured turns are counted beside the mean, never
averaged in as 0."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.metrics.kernel import Labels, Long
from harness.metrics.segments import Segment
from harness.run.folder import AGG_COLUMNS


def turn_values(per_turn: pd.DataFrame, by=("arm_id", "session_id", "turn_index"), sort: bool = False) -> pd.DataFrame:
    """Each turn's value per `by` group (columns `by` and value): its repeats averaged (NaN-skipping),
    turns with no measured repeat left out (unmeasured is not zero)."""
    t = per_turn.assign(value=pd.to_numeric(per_turn["value"], errors="coerce"))
    return t.groupby(list(by), sort=sort)["value"].mean().dropna().reset_index()


def groups(codes: np.ndarray) -> list[np.ndarray]:
    """The rows of each group, ascending, groups in the order of their codes (pd.factorize's: the
    order of first appearance); none for no rows."""
    order = np.argsort(codes, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1) if len(order) else []


def _linear(s: list[float], q: float) -> float:
    """numpy's percentile of sorted values at fraction q ("linear" method), with numpy's own steps
    (index (n-1)q, lower index and weight, `_lerp`'s two forms around a weight of 0.5), so the
    result is the same float; `s` non-empty."""
    n = len(s)
    v = (n - 1) * q
    lower = -1 if v >= n - 1 else math.floor(v)  # numpy marks an index at the last value -1
    a, b = s[lower], s[-1 if lower == -1 else lower + 1]
    g = v - lower
    d = b - a
    return b - d * (1 - g) if g >= 0.5 else a + d * g


def _quantiles(vals: np.ndarray) -> tuple[float, float]:
    """p50 and p95 of measured values (NaN when none), as pandas' Series.quantile computes them
    (numpy's linear interpolation, asked as percentiles): `np.percentile(vals, [50, 95])` without its
    set-up per call (a report has thousands of groups), equal to it float for float, signs of
    zero and NaN included (tested)."""
    if not len(vals):
        return np.nan, np.nan
    vals = np.asarray(vals, dtype=float)
    a = np.sort(vals)
    if np.isnan(a[-1]) or (np.signbit(vals) & (vals == 0)).any():  # (numpy's sort may write -0.0 as 0.0)
        # a NaN (numpy's answer is NaN), or a -0.0 that numpy's partition of the values in their
        # order may place either side of an equal 0.0 where a sort would not: numpy's own percentile
        p50, p95 = np.percentile(vals, [50.0, 95.0])
        return float(p50), float(p95)
    s = a.tolist()
    return _linear(s, 50.0 / 100), _linear(s, 95.0 / 100)


def _mean(vals: np.ndarray) -> float:
    """The mean of measured values as pandas' Series.mean takes it (numpy's pairwise sum over the
    count), without a Series per group."""
    return float(vals.sum() / len(vals))


def aggregate(per_turn: pd.DataFrame, labels: pd.DataFrame, segments: list[Segment]) -> pd.DataFrame:
    """Mean over turns (repeats first averaged per turn), with counts of measured and unmeasured
    turns and the between-repeat spread (mean per-turn standard deviation across repeats)."""
    g = per_turn.groupby(["arm_id", "metric", "session_id", "turn_index"], sort=False)
    turn = g["value"].agg(["mean", "std", "count"]).reset_index()
    turn = turn.rename(columns={"mean": "value", "std": "repeat_sd", "count": "n_measured_repeats"})
    keys = labels[["session_id", "turn_index"]]
    rows = []
    for seg in segments:
        sel = keys[seg.mask(labels).to_numpy()]
        if sel.empty:
            continue
        sub = turn.merge(sel, on=["session_id", "turn_index"], how="inner")
        for (arm_id, metric), grp in sub.groupby(["arm_id", "metric"], sort=False):
            measured = grp["n_measured_repeats"] > 0
            vals = grp.loc[measured, "value"]
            p50, p95 = _quantiles(vals.to_numpy(float))
            rows.append({
                "arm_id": arm_id, "metric": metric, "segment": seg.name,
                "mean": float(vals.mean()) if len(vals) else np.nan, "p50": p50, "p95": p95,
                "n": int(measured.sum()), "n_unmeasured": int((~measured).sum()),
                "n_sessions": int(grp.loc[measured, "session_id"].nunique()),
                "repeat_sd": float(grp["repeat_sd"].mean()) if grp["repeat_sd"].notna().any() else np.nan,
            })
    return pd.DataFrame(rows, columns=AGG_COLUMNS)


def aggregate_long(long: Long, lab: Labels, arms: list, sessions: list, metrics: list,
                   labels: pd.DataFrame, segments: list[Segment]) -> pd.DataFrame | None:
    """aggregate without a merge per segment: each (arm, metric) group's rows are
    contiguous once (stable sort), a segment is a boolean mask over them. None when turns repeat
    (repeats: the per-turn mean and spread need aggregate's groupby)."""
    c = long.cols
    turn = c["sess"] * (int(c["tix"].max(initial=0)) + 1) + c["tix"]
    am = c["arm"] * (len(metrics) + 1) + c["metric"]
    key = am * (int(turn.max(initial=0)) + 1) + turn
    if pd.Index(key).has_duplicates:
        return None
    li = lab.rows_of(c["sess"], c["tix"], sessions)
    value = c["value"]
    measured = ~np.isnan(value)
    group_rows = groups(pd.factorize(am)[0])
    n_sess = int(c["sess"].max(initial=0)) + 1
    out = []
    for seg in segments:
        mask = seg.mask(labels).to_numpy(bool)
        sel_row = (li >= 0) & mask[np.clip(li, 0, None)] if len(li) else np.zeros(0, bool)
        found = []
        for rows in group_rows:
            sel = rows[sel_row[rows]]
            if len(sel):
                found.append((sel[0], sel))
        for _, sel in sorted(found, key=lambda x: x[0]):
            meas = measured[sel]
            nm = int(meas.sum())
            vals = value[sel][meas]
            p50, p95 = _quantiles(vals)
            r0 = sel[0]
            out.append({"arm_id": arms[c["arm"][r0]], "metric": metrics[c["metric"][r0]], "segment": seg.name,
                        "mean": _mean(vals) if nm else np.nan, "p50": p50, "p95": p95,
                        "n": nm, "n_unmeasured": int(len(sel) - nm),
                        "n_sessions": int(np.count_nonzero(np.bincount(c["sess"][sel][meas], minlength=n_sess))),
                        "repeat_sd": np.nan})
    return pd.DataFrame(out, columns=AGG_COLUMNS)
