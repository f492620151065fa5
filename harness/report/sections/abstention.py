"""Abstention by answerability: per arm, turns, abstentions, precision and recall, and per
answerability label the share abstained (k of n), as the abstention table of the scoring step
holds them (harness.metrics.families.answers.abstention_table)."""
from __future__ import annotations

import re

from harness.report.format import count, fmt
from harness.report.load import RESCORE, ReportRun
from harness.store.folder import TABLES

LABEL_COLUMN = re.compile(r"^n\[(.*)\]$")


def build(run: ReportRun) -> dict | None:
    """{labels, rows} or {missing: text}; None when no arm answered or abstained."""
    if "abstention" in run.missing:
        return {"missing": f"Abstention not scored: no {TABLES['abstention']} ({RESCORE})."}
    ab = run.table("abstention")
    if ab is None or ab.empty:
        return None
    labels = sorted(m.group(1) for m in map(LABEL_COLUMN.match, ab.columns) if m)
    by_arm = {r["arm_id"]: r for r in ab.to_dict("records")}
    rows = []
    for a in run.arms:
        r = by_arm.get(a)
        if r is None:
            continue
        cells = [{"n": count(r.get(f"n[{lab}]")), "k": count(r.get(f"abstained[{lab}]")),
                  "rate": fmt(r.get(f"abstain_rate[{lab}]"))} for lab in labels]
        rows.append({"label": run.label[a], "n": count(r["n"]), "abstained": count(r["abstained"]),
                     "precision": fmt(r["precision"]), "recall": fmt(r["recall"]), "cells": cells})
    return {"labels": labels, "rows": rows, "missing": None}
