"""Warnings: what limits the reading of a run (what the folder lacks, status, pooled corpus, dirty
work tree, unmeasured turns, n/a arms, errors, no judgments, repeats, no comparisons), the holes in
the judgments per arm (top-10 documents without a judgment, those relevant for another turn) and arms
whose top-10 lists coincide, said once with the reason the traces record."""
from __future__ import annotations

from harness.analysis.pool_warnings import ELSEWHERE, HOLES, holes_by_arm, holes_text, qrels_said
from harness.report.format import scrub, text
from harness.report.load import ReportRun
from harness.report.table import coinciding_text
from harness.store.folder import JUDGMENTS, TABLES
from harness.store.turns import unmeasured_reasons


def unmeasured_groups(run: ReportRun) -> list[tuple[list[str], str]]:
    """Metrics with unmeasured turns (segment all), those with the same pattern grouped:
    [(metrics, "12 turns in every arm (no relevant document)")]."""
    all_seg = run.agg[(run.agg["segment"] == "all") & (run.agg["n_unmeasured"].fillna(0) > 0)]
    reasons = unmeasured_reasons(run.folder) if run.scored else {}  # read a row group at a time
    n_arms = len(set(run.agg.loc[run.agg["segment"] == "all", "arm_id"]))
    groups: dict[str, list[str]] = {}
    for metric, g in all_seg.groupby("metric", sort=False):
        counts = {run.label.get(a, a): int(k) for a, k in zip(g["arm_id"], g["n_unmeasured"])}
        if len(counts) == n_arms and len(set(counts.values())) == 1:
            what = f"{next(iter(counts.values()))} turn(s) in every arm"
        else:
            what = "; ".join(f"{lab}: {k}" for lab, k in counts.items())
        why = sorted(reasons.get(metric, ()))
        groups.setdefault(what + (f" ({', '.join(why)})" if why else ""), []).append(metric)
    return [(ms, what) for what, ms in groups.items()]


def _run_state(run: ReportRun) -> list[dict]:
    man = run.manifest
    out = []
    if man.status not in (None, "complete"):
        out.append({"level": "warn", "text": f"run status is {man.status!r}"
                    + (f": {man.failure}" if man.failure else "")})
    es = man.eval_set.model_dump()
    if es.get("pooled_corpus"):
        out.append({"level": "warn", "text": f"pooled corpus ({es.get('name')}): every document is relevant to some "
                    "turn, so absolute scores are inflated; compare arms, not leaderboard numbers."})
    if man.git.get("dirty"):
        out.append({"level": "info", "text": "the work tree had uncommitted changes (git dirty) when the run started."})
    return out


def _arm_state(run: ReportRun) -> list[dict]:
    """Unmeasured turns, arms that are n/a on every turn or on some, turns that ended in an error."""
    out = []
    all_seg = run.agg[run.agg["segment"] == "all"]
    for metrics, what in unmeasured_groups(run):
        out.append({"level": "warn", "text": f"unmeasured turns (counted beside the mean, never averaged in) of "
                    f"{', '.join(metrics)}: {what}"})
    na_all = all_seg[(all_seg["metric"] == run.headline[0]) & (all_seg["n"].fillna(0) == 0)]["arm_id"].tolist()
    for a in na_all:
        out.append({"level": "warn", "text": f"{run.label.get(a, a)} is n/a on every turn of this set."})
    tr = run.traces
    if tr.empty:
        return out
    fin = tr[tr["is_final"]]
    na = fin[fin["not_applicable"].map(lambda x: text(x) is not None)]
    for a, g in na.groupby("arm_id", sort=False):
        if a in na_all:
            continue
        why = ", ".join(sorted({str(x) for x in g["not_applicable"]}))
        out.append({"level": "info", "text": f"{run.label.get(a, a)} is n/a on {len(g)} of "
                    f"{int((fin['arm_id'] == a).sum())} turn(s) ({why})."})
    err = fin[fin["error"].map(lambda x: text(x) is not None)]
    for a, g in err.groupby("arm_id", sort=False):
        out.append({"level": "warn", "text": f"{run.label.get(a, a)}: {len(g)} turn(s) ended in an error "
                    f"(e.g. {text(g['error'].iloc[0])})."})
    return out


def build(run: ReportRun) -> dict:
    """{entries: [{level: warn|info, text}]}."""
    out = [{"level": "warn", "text": n} for n in run.notes] + _run_state(run) + _arm_state(run)
    answers = run.turns_of(["answered"])
    if not run.has_judgments:
        who = ", ".join(run.label.get(a, a) for a in dict.fromkeys(answers["arm_id"]))
        out.append({"level": "warn", "text": f"{' and '.join(run.judged)} not measured (no {JUDGMENTS}; run "
                    "`harness judge RUN` with a judge endpoint)" + (f"; arms with answers: {who}." if who else "; no arm answered.")})
    if run.manifest.repeats > 1:
        out.append({"level": "info", "text": f"{run.manifest.repeats} repeats: metrics average the repeats "
                    "per turn; the drill-down shows the first repeat."})
    if run.table("comparisons") is None:
        out.append({"level": "info", "text": f"no {TABLES['comparisons']} (no `original` arm, or metrics not run): "
                    "no paired comparisons."})
    out += [{"level": "info", "text": line} for line in coinciding_text(run.table("coinciding"), run.label)]
    out += [{"level": "warn" if h["relevant_elsewhere"] else "info", "text": "holes in the judgments: "
             + holes_text(run.label.get(a, a), h)} for a, h in holes_by_arm(run.turns_of([HOLES, ELSEWHERE])).items()]
    out.append({"level": "info", "text": qrels_said(run.folder) + "."})
    return {"entries": [{**e, "text": scrub(e["text"])} for e in out], "relevance": relevance_agreement(run)}


def relevance_agreement(run: ReportRun) -> dict | None:
    """The LLM's relevance grades against people's on the sampled labelled pairs: kappa and the
    confusion matrix (the scoring's agreement table)."""
    from harness.metrics.qrels import agreement

    a = agreement(run.table("agreement"))
    if a is None:
        return None
    m = a.matrix
    return {"line": a.line(), "columns": [int(c) for c in m.columns],
            "rows": [{"human": int(h), "cells": [int(v) for v in m.loc[h]]} for h in m.index]}
