"""Paired comparisons: the rows of the comparisons table the scoring step wrote (arm against the
run's reference arm per metric and segment), formatted; significant rows classed better/worse."""
from __future__ import annotations

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


def build(run: ReportRun) -> dict:
    """{present: the run has a comparisons table, rows, family: over what its Holm p are adjusted}."""
    c = run.table("comparisons")
    m = 0 if c is None or "holm_m" not in c or c.empty else int(c["holm_m"].max())
    return {"present": c is not None, "rows": [] if c is None else [row(run, r) for r in c.to_dict("records")],
            "family": holm_said(m) + (f"; {STATS.said()}" if m else "")}
