"""How far the judge's faithfulness agrees with people's ratings (`harness import ratings`), as
harness.analysis.review.judge_agreement reads them from the run folder; shown under abstention."""
from __future__ import annotations

from harness.report.load import ReportRun


def build(run: ReportRun) -> dict | None:
    from harness.analysis.review import judge_agreement

    a = judge_agreement(run.dir)
    if not a or not a.get("n"):
        return None
    return {"n": a["n"], "agreement": f"{a['agreement']:.0%}", "judge": f"{a['judge_mean']:.3f}",
            "human": f"{a['human_mean']:.3f}"}
