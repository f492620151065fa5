"""Whether two run folders hold the same metrics: every row of metrics.parquet (aggregates and
per-turn values) of every metric but the operational ones (timings differ between any two runs of
the same code), compared value for value. For a change that must not move a number (a refactor):
run `make demo` before and after, then for each eval set

    python scripts/metrics_equal.py BEFORE/runs/demo-*-b2b AFTER/runs/demo-*-b2b

Prints what it compared; exit 0 when equal, 1 when not (naming the metrics that differ)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from harness.errors import Exit
from harness.metrics.registry import resolve

ORDER = ["kind", "arm_id", "metric", "segment", "session_id", "turn_index", "repeat"]


def quality_rows(run: Path) -> tuple[pd.DataFrame, int]:
    """The run's metrics rows without the operational metrics, in one order; how many were left out."""
    t = pq.read_table(run / "metrics.parquet").to_pandas()
    ops = {m for m in t["metric"].unique() if resolve(m).kind == "operational"}
    t = t[~t["metric"].isin(ops)]
    return t.sort_values(ORDER, na_position="first").reset_index(drop=True), len(ops)


def differing(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The metrics whose rows differ (all of them when the two tables have other rows)."""
    if len(a) != len(b) or not a[ORDER[:4]].equals(b[ORDER[:4]]):
        return sorted(set(a["metric"]) | set(b["metric"]))
    rows = ~((a == b) | (a.isna() & b.isna())).all(axis=1)
    return sorted(set(a.loc[rows, "metric"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    a = ap.parse_args()
    (ta, left_out), (tb, _) = quality_rows(a.before), quality_rows(a.after)
    diff = differing(ta, tb)
    what = f"{len(ta)} rows of {ta['metric'].nunique()} metrics ({left_out} operational left out)"
    print(f"{a.before.name} ~ {a.after.name}: {what}: " + (f"DIFFERENT in {', '.join(diff)}" if diff else "equal"))
    return int(Exit.REGRESSION if diff else Exit.PASS)


if __name__ == "__main__":
    sys.exit(main())
