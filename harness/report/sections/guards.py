"""Identifiers and filters: the guard metrics' aggregates (segment all) per arm and, from the
filter-field table scoring wrote, precision / recall per filter field (applied / expected)."""
from __future__ import annotations

import pandas as pd

from harness.report.format import cell, count, fmt
from harness.report.load import RESCORE, ReportRun
from harness.store.folder import TABLES

GUARD_METRICS = ("identifier_preservation", "identifier_dropped", "filter_precision", "filter_recall",
                 "entitlement_violations", "wrong_filter_zero_relevant")


def fields(run: ReportRun, ff: pd.DataFrame) -> dict | None:
    """Rows: fields; columns: arms; cell: precision / recall (applied / expected)."""
    if ff.empty:
        return None
    have = set(ff["arm_id"])
    arms = [a for a in run.arms if a in have]
    by = {(r["arm_id"], r["field"]): r for r in ff.to_dict("records")}

    def one(a, f):
        r = by.get((a, f))
        return None if r is None else {"precision": fmt(r["precision"]), "recall": fmt(r["recall"]),
                                       "applied": count(r["applied"]), "expected": count(r["expected"])}

    return {"arms": [{"arm": a, "label": run.label[a]} for a in arms],
            "rows": [{"field": f, "cells": [one(a, f) for a in arms]} for f in sorted(set(ff["field"]), key=str)]}


def build(run: ReportRun) -> dict | None:
    """{metrics, rows, fields, fields_missing}; None when the run has no guard metric."""
    have = set(run.agg["metric"])
    metrics = [m for m in GUARD_METRICS if m in have]
    if not metrics:
        return None
    rows = [{"label": run.label[a], "arm": a, "cells": [cell(run.key, a, m, "all", run.aggregate(a, m)) for m in metrics]}
            for a in run.arms]
    ff = run.table("filter_fields")
    missing = f"Filters per field not scored: no {TABLES['filter_fields']} ({RESCORE})." \
        if "filter_fields" in run.missing else None
    return {"metrics": metrics, "rows": rows, "fields": fields(run, ff) if ff is not None else None,
            "fields_missing": missing}
