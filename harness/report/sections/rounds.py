"""Rounds of the corrective arms: how many rounds each arm used (overall and per turn index),
from the per-turn values of `rounds_used`, and the loop metrics' aggregates."""
from __future__ import annotations

from harness.report.format import cell, fmt
from harness.report.load import ReportRun
from harness.metrics.segments import BUCKETS
from harness.report.table import bucket

LOOP_METRICS = ("rounds_used", "rescued", "wasted_rounds", "recall_at_stop")


def tables(run: ReportRun) -> dict | None:
    r = run.turns_of(["rounds_used"]).dropna(subset=["value"])
    if r.empty:
        return None
    r = r.assign(rounds=r["value"].astype(int), bucket=r["turn_index"].map(bucket))
    have = set(r["arm_id"])
    arms = [a for a in run.arms if a in have]
    max_r = int(r["rounds"].max())
    cols = list(range(1, max_r + 1))
    dist, by_turn = [], []
    for a in arms:
        g = r[r["arm_id"] == a]
        counts = g["rounds"].value_counts().to_dict()
        dist.append({"arm": a, "label": run.label[a], "counts": {int(k): int(v) for k, v in counts.items()},
                     "cells": [int(counts.get(c, 0)) for c in cols], "n": int(len(g)), "mean": fmt(g["rounds"].mean(), 2)})
        for b in BUCKETS:
            gb = g[g["bucket"] == b]
            if not gb.empty:
                vc = gb["rounds"].value_counts()
                by_turn.append({"label": run.label[a], "bucket": b, "cells": [int(vc.get(c, 0)) for c in cols]})
    loop = [{"label": run.label[a], "cells": [cell(run.key, a, m, "all", run.aggregate(a, m)) for m in LOOP_METRICS]}
            for a in arms]
    return {"columns": cols, "dist": dist, "by_turn": by_turn, "loop_metrics": list(LOOP_METRICS), "loop": loop}


def flat(dist: list[dict]) -> str | None:
    """A sentence instead of the plot when every arm used rounds alike (the same share of turns for
    each number of rounds), else None."""
    shares = {tuple(round(c / (d["n"] or 1), 12) for c in d["cells"]) for d in dist}
    if len(shares) > 1:
        return None
    used = [i + 1 for i, v in enumerate(next(iter(shares), ())) if v]
    if len(used) == 1:
        return f"Every arm used {used[0]} round{'s' if used[0] != 1 else ''} on every turn: nothing to plot"
    return "Every arm used rounds in the same shares of its turns (the table): nothing to plot"


def build(run: ReportRun, plots: bool = True) -> dict | None:
    """The tables and their plot (base64 PNG or None) or the sentence that replaces it; None
    without a multi-round arm."""
    from harness.report import plotting as P

    out = tables(run)
    if out is None:
        return None
    said = flat(out["dist"])
    return {**out, "flat": said,
            "plot": P.draw("rounds_bars", out["dist"], f"rounds used — {run.key}") if plots and not said else None}
