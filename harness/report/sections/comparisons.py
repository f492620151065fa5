"""Paired comparisons: the rows of the comparisons table the scoring step wrote (arm against the
run's reference arm per metric and segment), formatted; significant rows classed better/worse. An
arm whose every row ties with the reference on every turn is one line instead of its rows."""
from __future__ import annotations

import pandas as pd

from harness.analysis.unchanged import ZERO, said
from harness.metrics.coinciding import TOP
from harness.metrics.stats import STATS, holm_said, p_cells
from harness.report.format import fmt, missing
from harness.report.load import ReportRun


def row(run: ReportRun, r: dict) -> dict:
    lo, hi, p_holm = r.get("ci_lo"), r.get("ci_hi"), r.get("p_holm")
    sig = not missing(p_holm) and p_holm < STATS.alpha and not missing(lo) and not missing(hi) and (lo > 0 or hi < 0)
    gap = r.get("oracle_gap_closed")
    return {
        "metric": r.get("metric"), "segment": r.get("segment"),
        "reference": run.label.get(r.get("reference"), r.get("reference")),
        "arm": run.label.get(r.get("arm"), r.get("arm")), "arm_id": r.get("arm"),
        "n_turns": r.get("n_turns"), "n_sessions": r.get("n_sessions"), "n_unmeasured": r.get("n_unmeasured"),
        "mean_ref": fmt(r.get("mean_ref")), "mean_arm": fmt(r.get("mean_arm")),
        "diff": "—" if missing(r.get("diff")) else f"{r['diff']:+.3f}",
        "ci": "—" if missing(lo) else f"[{lo:+.3f}, {hi:+.3f}]",
        "p": p_cells(r)[0], "p_holm": p_cells(r)[1],
        "wtl": f"{r.get('wins')}/{r.get('ties')}/{r.get('losses')}",
        "mde": fmt(r.get("mde")), "gap": "—" if missing(gap) else f"{gap:.0%}",
        "cls": (("better" if r["diff"] * (-1 if r.get("direction") == "lower" else 1) > 0 else "worse")
                if sig and r.get("direction") != "none" else ""),
    }


def unchanged(run: ReportRun, c: pd.DataFrame) -> dict[str, str]:
    """Arm id -> why it is the reference arm's equal: every measured row of the comparisons table a
    tie on every turn; `identical top 10 on every turn` where the scoring step found the two arms'
    top 10s the same (the coinciding table), else harness.analysis.unchanged.ZERO."""
    measured = c[c["n_turns"] > 0]
    tied = ((measured["wins"] == 0) & (measured["losses"] == 0)).groupby(measured["arm"], sort=False).all()
    co = run.table("coinciding")
    groups = [{r["arm_id"], *r["same_as"]} for r in ([] if co is None else co.to_dict("records"))]
    ref = c["reference"].iloc[0] if len(c) else None
    same_top = set().union(*(g for g in groups if ref in g)) if groups else set()
    return {arm: f"identical top {TOP} on every turn" if arm in same_top else ZERO
            for arm, ok in tied.items() if ok}


def build(run: ReportRun) -> dict:
    """{present: the run has a comparisons table, rows, family: over what its Holm p are adjusted,
    unchanged: the line that says the arms left out}."""
    c = run.table("comparisons")
    m = 0 if c is None or "holm_m" not in c or c.empty else int(c["holm_m"].max())
    same = {} if c is None or c.empty else unchanged(run, c)
    rows = [] if c is None else [row(run, r) for r in c.to_dict("records") if r.get("arm") not in same]
    named = {run.label.get(a, a): why for a, why in same.items()}
    ref = None if c is None or c.empty else run.label.get(c["reference"].iloc[0], c["reference"].iloc[0])
    return {"present": c is not None, "rows": rows, "family": holm_said(m) + (f"; {STATS.said()}" if m else ""),
            "unchanged": f"{said(named, f'equal to {ref}')}: their rows are left out" if named else None}
