"""Headline across runs: recall@10 and nDCG@10 over all labelled turns (segment all) per arm, one
column group per run, as the runs' metrics tables hold them."""
from __future__ import annotations

from harness.report.format import cell
from harness.report.load import ReportRun

HEADLINE_METRICS = ("recall@10", "ndcg@10")


def build(runs: list[ReportRun]) -> dict:
    arms = list(dict.fromkeys(a for r in runs for a in r.arms))
    rows = []
    for a in arms:
        cells = [cell(r.key, a, m, "all", r.aggregate(a, m, "all")) for r in runs for m in HEADLINE_METRICS]
        rows.append({"arm": a, "label": next((r.label[a] for r in runs if a in r.label), a), "cells": cells})
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["label"]] = seen.get(row["label"], 0) + 1
    for row in rows:  # the same label for different arm ids (e.g. other defaults): show the id
        row["show_id"] = seen[row["label"]] > 1
    return {"metrics": list(HEADLINE_METRICS), "rows": rows}
