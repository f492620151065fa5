"""Render metric aggregates as terminal tables (rich). Rendering only; also the turn segments and
turn buckets shared with the HTML report (harness.report.sections) and the CLI (this module stays
light to import)."""
from __future__ import annotations

import math

import pandas as pd
from rich.table import Table

from harness.metrics.segments import TURN_SEGMENTS, bucket  # noqa: F401  (re-exported for the report and the terminal)


def coinciding_text(co: pd.DataFrame | None, labels: dict[str, str]) -> list[str]:
    """Arms whose top-10 lists are identical on every measured turn, one plain sentence per group
    with the reasons the traces record (the terminal and the HTML report say it so)."""
    if co is None or co.empty:
        return []
    out = []
    for r in co.to_dict("records"):
        same = list(r["same_as"])
        names = " = ".join(labels.get(a, a) for a in [*same, r["arm_id"]])
        why = "; ".join(f"{labels.get(a, a)}: {w}" for a, w in zip(same, r["reasons"]) if w)
        out.append(f"{names} on all {r['n_turns']} turns (identical top 10)" + (f": {why}" if why else ""))
    return out


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

