"""When are two runs equal (DESIGN.md): the same set of trace keys, and on every key the same
values in every column except run_id, timestamps, the ms_* timings, cache_hits and counts of
HTTP calls actually made; and the same metrics except latency metrics and the cache-hit
rate."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.store.folder import RunFolder
from harness.store.traces import KEY, read_traces

IGNORED_TRACE_COLUMNS = {"run_id", "cache_hits"}
IGNORED_METRIC_PREFIXES = ("latency", "ms_", "cache_hit")


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in df.columns if c not in IGNORED_TRACE_COLUMNS and not c.startswith("ms_")]
    out = df[cols].copy()
    for c in out.columns:
        out[c] = out[c].map(lambda v: repr(v.tolist() if hasattr(v, "tolist") else v))
    return out.sort_values(list(KEY)).reset_index(drop=True)


def trace_differences(run_a: Path, run_b: Path, limit: int = 20) -> list[str]:
    a = _comparable(read_traces(run_a).to_pandas())
    b = _comparable(read_traces(run_b).to_pandas())
    ka = set(map(tuple, a[list(KEY)].values.tolist()))
    kb = set(map(tuple, b[list(KEY)].values.tolist()))
    diffs = [f"key only in A: {k}" for k in sorted(ka - kb)][:limit] + [f"key only in B: {k}" for k in sorted(kb - ka)][:limit]
    if len(a) != len(ka) or len(b) != len(kb):
        diffs.append(f"duplicate keys: A {len(a) - len(ka)}, B {len(b) - len(kb)}")
    if diffs:
        return diffs
    for col in a.columns:
        bad = a.index[a[col] != b[col]]
        for i in bad[:limit]:
            diffs.append(f"{tuple(a.loc[i, list(KEY)])}: {col}: {a.loc[i, col]} != {b.loc[i, col]}")
    return diffs[:limit]


def metric_differences(run_a: Path, run_b: Path, limit: int = 20) -> list[str]:
    ma, mb = RunFolder(run_a).metrics(), RunFolder(run_b).metrics()
    keep = lambda m: m[~m["metric"].astype(str).str.startswith(IGNORED_METRIC_PREFIXES)]  # noqa: E731
    ma, mb = keep(ma), keep(mb)
    cols = [c for c in ma.columns]
    sa = ma.sort_values(cols[:4] + ["session_id", "turn_index", "repeat"], na_position="first").reset_index(drop=True)
    sb = mb.sort_values(cols[:4] + ["session_id", "turn_index", "repeat"], na_position="first").reset_index(drop=True)
    if len(sa) != len(sb):
        return [f"metrics rows: {len(sa)} != {len(sb)}"]
    diffs = []
    for col in cols:
        x, y = sa[col].astype(object), sb[col].astype(object)
        same = (x == y) | (x.isna() & y.isna())
        for i in sa.index[~same][:limit]:
            diffs.append(f"metrics row {i} ({sa.loc[i, 'arm_id']}, {sa.loc[i, 'metric']}): {col}: {x[i]} != {y[i]}")
    return diffs[:limit]


def runs_equal(run_a: Path, run_b: Path) -> list[str]:
    """Differences under the equality rule; empty when the runs are equal."""
    return trace_differences(run_a, run_b) + metric_differences(run_a, run_b)
