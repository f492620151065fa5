"""Metrics by turn index: per IR metric of the run, judged@10 beside them (how much of the rankings
the judgments see), and the judged metrics when judged, the exact
aggregates of its metrics table (turn-index segments as columns, every other segment in a details
table) and, for the main metrics, a plot of the mean per turn bucket with a session-level bootstrap 95% CI
(computed by the scoring step: harness.metrics.spread)."""
from __future__ import annotations

from harness.metrics.registry import coverage, lookup
from harness.metrics.segments import BUCKETS
from harness.metrics.stats import STATS
from harness.report.colors import arm_colors
from harness.report.format import cell, fmt
from harness.report.load import ReportRun
from harness.report.table import TURN_SEGMENTS, bucket

SHOWN = ("ir", "judged")  # the metric families whose tables this section shows


def metric_table(run: ReportRun, metric: str) -> dict:
    """The exact aggregates of one metric: turn-index segments as columns (main table) and every
    other segment as rows (details table)."""
    segs_here = list(dict.fromkeys(run.agg.loc[run.agg["metric"] == metric, "segment"]))
    main = [s for s in TURN_SEGMENTS if s in segs_here]
    other = [s for s in segs_here if s not in main]
    arms = [a for a in run.arms if any(run.aggregate(a, metric, s) is not None for s in segs_here)]
    rows = [{"arm": a, "label": run.label[a],
             "cells": [cell(run.key, a, metric, s, run.aggregate(a, metric, s)) for s in main]} for a in arms]
    other_rows = [{"segment": s, "cells": [cell(run.key, a, metric, s, run.aggregate(a, metric, s)) for a in arms]}
                  for s in other]
    for r in other_rows:
        r["n"] = common_n(r["cells"])
    return {"metric": metric, "segments": main, "rows": rows, "other_segments": other_rows,
            "n": [common_n([r["cells"][i] for r in rows]) for i in range(len(main))],
            "arms": [{"arm": a, "label": run.label[a]} for a in arms]}


def common_n(cells: list[dict]) -> dict | None:
    """The counts most cells of a column (or row) share, said once in its head: {n, n_unmeasured};
    a cell with other counts shows its own (`shared` False). None when no cell is present."""
    counts = [(c["n"], c["n_unmeasured"]) for c in cells if c.get("present")]
    if not counts:
        return None
    n, nu = max(set(counts), key=lambda k: (counts.count(k), k))
    for c in cells:
        c["shared"] = bool(c.get("present")) and (c["n"], c["n_unmeasured"]) == (n, nu)
    return {"n": n, "n_unmeasured": nu}


def _point(run: ReportRun, arm: str, metric: str, b: str) -> dict:
    sp = run.spread(arm, metric, b)
    if sp is None:
        return {"bucket": b, "mean": None, "lo": None, "hi": None, "n": 0}
    return {"bucket": b, "mean": sp["mean"], "lo": sp["lo"], "hi": sp["hi"], "n": int(sp["n"]),
            "n_sessions": int(sp["n_sessions"])}


def turn_series(run: ReportRun, metric: str) -> tuple[list[dict], list[str]]:
    """Mean per turn bucket (1, 2, 3, 4+) per arm with its session-level bootstrap 95% CI, as the
    scoring step wrote them (the `spread` table; harness.metrics.spread)."""
    have = set(run.labels["turn_index"].map(bucket))
    buckets = [b for b in BUCKETS if b in have]
    series = []
    colors = arm_colors([run.label[a] for a in run.arms])
    for arm in run.arms:
        pts = [_point(run, arm, metric, b) for b in buckets]
        if any(p["n"] for p in pts):
            series.append({"arm": arm, "label": run.label[arm], "color_index": colors[run.label[arm]], "points": pts})
    return series, buckets


def plot_or_sentence(run: ReportRun, metric: str) -> tuple[str | None, str | None]:
    """(the plot by turn index, None), or (None, one sentence) when a plot would carry no
    information: every arm's mean and CI the same at every turn index, or nothing to draw."""
    from harness.report import plotting as P
    from harness.report.values import flat

    series, buckets = turn_series(run, metric)
    if not (series and buckets):
        return None, None
    values = [p[k] for s in series for p in s["points"] for k in ("mean", "lo", "hi")]
    finite = [v for v in values if v is not None and v == v]
    if not finite:
        return None, f"No mean of {metric} per turn index in this run's tables (see Warnings): nothing to plot"
    if len(buckets) == 1:  # dots on one x position say nothing the table does not
        return None, (f"Every labelled turn of this run is turn {buckets[0]}: {metric} has no trend by turn index "
                      "to plot (its means and CIs are in the table)")
    if flat(values):
        return None, (f"{metric} is {fmt(finite[0])} for every arm at every turn index ({', '.join(buckets)}), CI "
                      "included: nothing to plot")
    unit = lookup(metric) is not None and lookup(metric).family in SHOWN  # ir and judged metrics are in 0..1
    return P.draw("metric_by_turn", series, buckets, metric,
                  f"{metric} by turn index — {run.key} ({1 - STATS.alpha:.0%} session bootstrap CI)", unit), None


def build(run: ReportRun, plots: bool = True) -> dict:
    """{tables: [metric table with its plot or None]} for every recall@, ndcg@ and mrr@ metric and
    the judged metrics (a judged run's), its unmeasured turns counted in every cell."""
    plotted = run.headline + run.judged  # plotted: the run's headline metrics, and the judged ones when judged
    beside = coverage(run.manifest.metrics)[:1]  # judged@k, beside the ranking metrics (not plotted)
    ir = [m for m in dict.fromkeys(run.agg["metric"]) if (lookup(m) is not None and lookup(m).family in SHOWN)
          or m in beside]
    ir = [m for m in plotted + beside if m in ir] + [m for m in ir if m not in plotted + beside]
    tables = []
    for m in ir:
        plot, flat = plot_or_sentence(run, m) if m in plotted and plots else (None, None)
        tables.append({**metric_table(run, m), "plot": plot, "flat": flat})
    unjudged = [m for m in run.judged if m not in ir]
    na = None if not unjudged else (f"{', '.join(unjudged)} n/a: this run has no judgments (`harness judge RUN`, "
                                    "then `harness metrics RUN`), so no turn is measured")
    return {"tables": tables, "na": na}
