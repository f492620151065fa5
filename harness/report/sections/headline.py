"""Headline across runs: each run's headline recall and nDCG (harness.metrics.registry.headline: at
its own cutoffs) and the judged metrics (n/a, said why, for a run not judged) over all
labelled turns (segment all) per arm, one column group per run, as the runs' metrics tables hold
them, each with the session-level bootstrap 95% CI of the arm's own per-turn values that the scoring
step wrote (the run folder's `spread` table, the plots' bands) and the best arm of each run and metric marked in the metric's direction (oracle arms,
an upper bound, are not ranked): ★ where the analysis stage found it significantly better than every
other arm, `tied` on it and the arms it is not significantly better than (harness.analysis.leaders)."""
from __future__ import annotations

from harness.metrics.registry import direction_of, judged as judged_metrics
from harness.report.format import cell, fmt
from harness.report.load import ReportRun


def judged(run: ReportRun) -> bool:
    return any(run.aggregate(a, m) is not None for a in run.arms for m in run.judged)


def _cell(run: ReportRun, arm: str | None, metric: str) -> dict:
    c = {"best": False, "tied": False, "ci": None, "value": None, "arm": arm, "na": False}
    if arm is None:
        return {**c, "present": False}
    if metric in run.judged and not judged(run):
        return {**c, "present": False, "na": True}
    c.update(cell(run.key, arm, metric, "all", run.aggregate(arm, metric, "all")))
    sp = run.spread(arm, metric, "all") if c.get("present") and c["n"] else None
    if sp is not None and sp["n"]:
        c.update(ci=f"[{fmt(sp['lo'])}, {fmt(sp['hi'])}]", value=sp["mean"])
    return c


def _mark_best(rows: list[dict], n_runs: int, metrics: list[str]) -> None:
    """Without the analysis stage's answer: set `best` on the cell of the highest mean per run and
    metric in its direction (ties all marked)."""
    for i in range(n_runs * len(metrics)):
        d = direction_of(metrics[i % len(metrics)])
        if d == "none":
            continue
        sign = -1.0 if d == "lower" else 1.0
        vals = [(sign * r["cells"][i]["value"], r) for r in rows
                if not r["oracle"] and r["cells"][i].get("value") is not None]
        if vals:
            top = max(v for v, _ in vals)
            for v, r in vals:
                r["cells"][i]["best"] = abs(v - top) < 1e-12


def _mark_tested(rows: list[dict], runs: list[ReportRun], metrics: list[str], marks: dict) -> None:
    """With the analysis stage's answer (harness.analysis.leaders): `best` (★) on the best arm where it
    is significantly better than every other ranked arm, else `tied` on it and on each arm it is not
    significantly better than."""
    for i in range(len(runs) * len(metrics)):
        mk = marks.get((runs[i // len(metrics)].key, metrics[i % len(metrics)]))
        for r in rows if mk else []:
            c = r["cells"][i]
            if c.get("arm") == mk["best"]:
                c["best"], c["tied"] = mk["leads"], not mk["leads"] and bool(mk["tied"])
            elif c.get("arm") in mk["tied"]:
                c["tied"] = True


def build(runs: list[ReportRun], marks: dict | None = None) -> dict:
    """Rows by label (runs pair arms by label: one row is one arm as people read it, whatever its
    id in each run); `differs` when the label's arm id is not the same in every run having it.
    `marks`: the best and tied arms per (run key, metric) the analysis stage found
    (harness.report.sections.leaders.marks), or None: the highest mean is then marked, untested."""
    # each run's headline recall and nDCG, then the judged metrics always (n/a, said why, where not judged)
    metrics = list(dict.fromkeys(m for r in runs for m in r.headline[:2])) + judged_metrics()
    labels = list(dict.fromkeys(r.label[a] for r in runs for a in r.arms))
    oracles = {a.arm_id for r in runs for a in r.data.arms if "oracle" in a.capabilities}
    rows = []
    for lab in labels:
        ids = [next((a for a in r.arms if r.label[a] == lab), None) for r in runs]
        cells = [_cell(r, a, m) for r, a in zip(runs, ids) for m in metrics]
        present = [a for a in ids if a is not None]
        rows.append({"arm": present[0], "label": lab, "cells": cells, "ids": present,
                     "differs": len(set(present)) > 1, "oracle": bool(oracles & set(present))})
    if marks is None:
        _mark_best(rows, len(runs), metrics)
    else:
        _mark_tested(rows, runs, metrics, marks)
    unjudged = [r.key for r in runs if not judged(r)]
    na = (f"{', '.join(judged_metrics())} n/a for {', '.join(unjudged)}: no judgments (`harness judge RUN`, then "
          "`harness metrics RUN`)" if unjudged else None)
    return {"metrics": metrics, "rows": rows, "na": na, "tested": marks is not None}
