"""Render metric aggregates as terminal tables (rich). Rendering only; also the turn segments and
turn buckets shared with the HTML report (harness.report.sections) and the CLI (this module stays
light to import)."""
from __future__ import annotations

import math

import pandas as pd
from rich.table import Table

TURN_SEGMENTS = ["all", "turn_index=1", "turn_index=2", "turn_index=3", "turn_index>=4", "turn_index>=2"]


def bucket(turn_index) -> str:
    """The turn bucket of a turn index: "1", "2", "3" or "4+"."""
    t = int(turn_index)
    return "4+" if t >= 4 else str(t)


def _fmt(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def by_turn_index(agg: pd.DataFrame, metric: str, arms: list[str]) -> tuple[list[str], list[list[str]]]:
    have = set(agg["segment"])
    segs = [s for s in TURN_SEGMENTS if s in have]
    header = ["arm"] + [s.replace("turn_index", "t") for s in segs]
    rows = []
    sub = agg[agg["metric"] == metric].set_index(["arm_id", "segment"])
    for arm in arms:
        cells = [arm]
        for s in segs:
            if (arm, s) not in sub.index:
                cells.append("—")
                continue
            r = sub.loc[(arm, s)]
            cell = _fmt(r["mean"]) if r["n"] else "n/a"
            cell += f" (n={int(r['n'])}" + (f", {int(r['n_unmeasured'])} unmeasured)" if r["n_unmeasured"] else ")")
            cells.append(cell)
        rows.append(cells)
    return header, rows


def rich_table(agg: pd.DataFrame, metric: str, arms: list[str], title: str) -> Table:
    header, rows = by_turn_index(agg, metric, arms)
    t = Table(title=title, show_lines=False)
    for h in header:
        t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t

