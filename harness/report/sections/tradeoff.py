"""Recall versus cost and latency: per arm over all turns, the run's headline recall (recall@10
unless its cutoffs lack 10), mean cost per turn, LLM calls per turn and latency p50/p95 from the
metrics table's aggregates, and their plot."""
from __future__ import annotations

from harness.report.colors import arm_colors
from harness.report.format import fmt, missing
from harness.report.load import ReportRun


def rows(run: ReportRun) -> list[dict]:
    """Headline recall, cost per turn, LLM calls and latency per arm (segment all)."""
    out = []
    recall = run.headline[0]
    colors = arm_colors([run.label[a] for a in run.arms])
    for arm in run.arms:
        i = colors[run.label[arm]]
        rec = run.aggregate(arm, recall)
        if rec is None or not rec["n"]:
            continue
        cost = run.aggregate(arm, "cost_usd")
        lat = run.aggregate(arm, "latency_total_ms")
        calls = run.aggregate(arm, "llm_calls")
        cost_v = float(cost["mean"]) if cost is not None and cost["n"] else None
        out.append({
            "arm": arm, "label": run.label[arm], "color_index": i, "y": float(rec["mean"]), "recall": fmt(rec["mean"]),
            "cost": cost_v, "cost_text": (f"{cost_v:.6f}" if cost_v is not None else "unmeasured"),
            "cost_unmeasured": int(cost["n_unmeasured"]) if cost is not None else 0,
            "llm_calls": fmt(calls["mean"], 2) if calls is not None else "—",
            "p50_ms": fmt(lat["p50"], 1) if lat is not None else "—",
            "p95_ms": float(lat["p95"]) if lat is not None and not missing(lat["p95"]) else None,
            "p95_text": fmt(lat["p95"], 1) if lat is not None else "—",
        })
    for n, r in enumerate(out, start=1):  # the numbers of the plot's legend
        r["num"] = n
    return out


def flat_axes(trade: list[dict]) -> tuple[list[str], list[str]]:
    """(the plot's x axes that carry information, a sentence for each axis that does not: every
    arm's value is the same, or none is measured)."""
    from harness.report.values import flat

    keep, said = [], []
    for key, what, unit in (("cost", "Cost per turn", "USD"), ("p95_ms", "p95 latency_total_ms", "ms")):
        vals = [r[key] for r in trade if r[key] is not None]
        if not flat(vals):
            keep.append(key)
        elif vals:
            v = f"{vals[0]:.6f}" if key == "cost" else f"{vals[0]:.1f}"
            said.append(f"{what}: every arm {v} {unit}" + (" (offline arms cost nothing)" if key == "cost" and not
                                                          vals[0] else "") + ", so it is not plotted")
        else:
            said.append(f"{what}: measured for no arm, so it is not plotted")
    return keep, said


def build(run: ReportRun, plots: bool = True) -> dict:
    """{rows, plot (base64 PNG or None), flat: sentences for the axes left out}."""
    from harness.report import plotting as P

    trade = rows(run)
    axes, flat = flat_axes(trade)
    what = " and ".join({"cost": "cost", "p95_ms": "p95 latency"}[a] for a in axes)
    return {"rows": trade, "flat": flat,
            "recall": run.headline[0],
            "plot": P.draw("tradeoff", trade, f"{run.headline[0]} vs {what} — {run.key}", run.headline[0], tuple(axes))
            if trade and plots and axes else None}
