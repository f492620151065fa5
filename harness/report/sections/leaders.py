"""The report's opening answer: per run (each on its own eval set), per headline metric, the best
arm against the run's reference arm (difference, 95% CI, Holm p) and whether it leads or is tied
with the arms it is not significantly better than; then each verdict block's count of regressions
and improvements. The numbers are computed by the analysis stage (harness.analysis.leaders, called
by `harness report`) and handed to the renderer; this module only formats them."""
from __future__ import annotations

from pathlib import Path

from harness.metrics.signflip import p_said
from harness.report.format import fmt, missing
from harness.report.load import ReportRun
from harness.report.sections.verdict import ARROW

NOT_COMPUTED = ("rendered from run folders alone: `harness report RUN...` computes each run's best arm against its "
                "reference arm and opens the report with it")
SHOWN_TIED = 4  # tied arms named; the others counted


def _signed(v) -> str:
    return "—" if missing(v) else f"{v + 0.0:+.3f}"  # + 0.0: no -0.000


def stats(c: dict) -> dict:
    """A comparison of the best arm with another, as the table shows it (best − other)."""
    ci = "—" if missing(c["ci_lo"]) else f"[{_signed(c['ci_lo'])}, {_signed(c['ci_hi'])}]"
    return {"label": c["label"], "mean": fmt(c["mean"]), "diff": _signed(c["diff"]), "ci": ci,
            "p": p_said(c.get("p"), c.get("p_floor"), digits=3),
            "p_holm": p_said(c.get("p_holm"), c.get("p_floor"), adjusted=True, digits=3), "cls": c.get("mark") or "",
            "n": f"{c['n_turns']} turns, {c['n_sessions']} sessions paired"}


def tied(m: dict) -> str:
    """`tied with 2 arms: a, b`: the arms the best is not significantly better than."""
    names = [o["label"] for o in m["tied"]]
    more = len(names) - SHOWN_TIED
    shown = ", ".join(names[:SHOWN_TIED]) + (f" and {more} more" if more > 0 else "")
    return f"tied with {len(names)} arm{'s' if len(names) > 1 else ''}: {shown}"


def _metric(m: dict) -> dict:
    ref = m["vs_reference"]
    if m["leads"]:
        status = "leads: significantly better than every other ranked arm"
    elif m["tied"]:
        status = tied(m)
    else:
        status = "the only ranked arm"
    return {"name": m["name"], "arrow": ARROW[m["direction"]][0], "direction": ARROW[m["direction"]][1],
            "best": m["best"]["label"], "best_mean": fmt(m["best"]["mean"]), "leads": m["leads"],
            "tied": bool(m["tied"]), "status": status, "best_is_reference": m["best_is_reference"],
            "vs_reference": stats(ref) if ref is not None else None,
            "next": stats(m["next"]) if m["next"] is not None else None}


def _run(r: dict, key: str) -> dict:
    return {"key": key, "eval_set": r["eval_set"], "reference": r["reference"], "partial": r["partial"],
            "why": r["why"], "metrics": [_metric(m) for m in r["metrics"]], "n_tests": r["n_tests"]}


def _blocks(verdict: dict) -> list[dict]:
    """One line per verdict block: what it compared and its counts."""
    return [{"candidate": b["candidate"], "baseline": b["baseline"], "regressions": b["summary"]["n_regressions"],
             "improvements": b["summary"]["n_improvements"], "gate": b["gate"]["verdict"] if b["gate"] else None}
            for b in verdict["blocks"]]


def build(inputs: dict | None, runs: list[ReportRun], verdict: dict) -> dict:
    """{computed, runs, blocks, why_not, method} for the template; `inputs`: harness.analysis.leaders.leaders
    of these runs, or None. `verdict`: the verdict section's data (its blocks' summaries)."""
    if inputs is None:
        return {"computed": False, "why_not": NOT_COMPUTED, "runs": [], "blocks": _blocks(verdict)}
    out = [_run(inputs[str(Path(r.dir).resolve())], r.key) for r in runs if str(Path(r.dir).resolve()) in inputs]
    any_run = next(iter(inputs.values()), None)
    method = None if any_run is None else {k: any_run[k] for k in ("alpha", "n_resamples", "n_permutations",
                                                                    "exact_max_sessions")}
    return {"computed": True, "why_not": None, "runs": out, "blocks": _blocks(verdict), "method": method}


def marks(inputs: dict | None, runs: list[ReportRun]) -> dict[tuple[str, str], dict] | None:
    """For the headline table: (run key, metric) -> {best: arm id, leads, tied: arm ids}; None when
    the analysis stage was not asked (the table then marks the highest mean)."""
    if inputs is None:
        return None
    out = {}
    for r in runs:
        a = inputs.get(str(Path(r.dir).resolve()))
        for m in (a or {}).get("metrics", []):
            out[(r.key, m["name"])] = {"best": m["best"]["arm_id"], "leads": m["leads"],
                                       "tied": {o["arm_id"] for o in m["tied"]}}
    return out
