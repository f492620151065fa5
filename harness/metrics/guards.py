"""Metrics of the guards, per turn, from the traces and labels:

- identifier_preservation: on turns with labelled identifiers that the user typed, the share of
  them that appears verbatim in every query the arm issued (all rounds);
- identifier_dropped: 1 when at least one of them is missing from some issued query;
- filter_precision / filter_recall: the applied preference filters (entitlement filters from
  the account excluded) against the expected filters, after normalising units and values
  (`5 l` = 5000 ml; lists compared as sets); precision on turns that applied a filter, recall
  on turns that expected one;
- entitlement_violations: entitlement fields a model proposed (rejected by the validator);
- wrong_filter_zero_relevant: 1 when the arm applied a filter that was not expected and its top
  10 holds no relevant document although the turn has one."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from harness.guards.identifiers import preserved
from harness.guards.units import normalise_value

GUARD_COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "issued_queries",
                 "applied_filters", "filter_violations", "ranking", "not_applicable", "error"]


def _norm_filter(f: dict, units: dict[str, str | None]) -> tuple:
    v = f.get("value")
    unit = units.get(f.get("field"))
    if isinstance(v, list):
        v = tuple(sorted(str(normalise_value(unit, x)) for x in v))
    else:
        v = normalise_value(unit, v)
        v = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v).strip().lower()
    return (f.get("field"), f.get("op", "eq"), v)


def per_turn_guards(rounds: pd.DataFrame, labels: pd.DataFrame, schema: list[dict]) -> pd.DataFrame:
    entitlement = {f["field"] for f in schema if f.get("kind") == "entitlement"}
    units = {f["field"]: f.get("unit") for f in schema}
    lab = labels.set_index(["session_id", "turn_index"])
    out = []
    for (arm, rep, sid, tix), g in rounds.groupby(["arm_id", "repeat", "session_id", "turn_index"], sort=False):
        final = g.sort_values("round").iloc[-1]
        if isinstance(final["not_applicable"], str) and final["not_applicable"]:
            continue
        row = lab.loc[(sid, tix)]
        user = row["user"] or ""
        ids = [i for i in (list(row["identifiers"]) if row["identifiers"] is not None else []) if i in user]
        queries = [q for qs in g["issued_queries"] for q in (list(qs) if qs is not None else [])]
        if ids:
            p = preserved(ids, queries)
            out.append((arm, rep, sid, tix, "identifier_preservation", p, None))
            out.append((arm, rep, sid, tix, "identifier_dropped", float(p < 1), None))
        applied = [f for f in json.loads(final["applied_filters"] or "[]") if f.get("field") not in entitlement]
        expected = json.loads(row["expected_filters"] or "[]")
        a = {_norm_filter(f, units) for f in applied}
        e = {_norm_filter(f, units) for f in expected}
        if a:
            out.append((arm, rep, sid, tix, "filter_precision", len(a & e) / len(a), None))
        if e:
            out.append((arm, rep, sid, tix, "filter_recall", len(a & e) / len(e), None))
        viol = final["filter_violations"]
        out.append((arm, rep, sid, tix, "entitlement_violations", float(len(viol) if viol is not None else 0), None))
        rel = {d for d, gr in json.loads(row["qrels"]).items() if int(gr) >= 1}
        if rel and (a - e):
            top = set(list(final["ranking"])[:10]) if final["ranking"] is not None else set()
            out.append((arm, rep, sid, tix, "wrong_filter_zero_relevant", float(not (top & rel)), None))
    return pd.DataFrame(out, columns=["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"])


def filter_fields_table(rounds: pd.DataFrame, labels: pd.DataFrame, schema: list[dict]) -> pd.DataFrame:
    """Precision and recall per filter field and arm (micro-averaged over turns)."""
    entitlement = {f["field"] for f in schema if f.get("kind") == "entitlement"}
    units = {f["field"]: f.get("unit") for f in schema}
    expected_by_turn = {(sid, tix): {_norm_filter(f, units) for f in json.loads(ef or "[]")}
                        for sid, tix, ef in zip(labels["session_id"], labels["turn_index"], labels["expected_filters"])}
    counts: dict[tuple, list[int]] = {}
    final = rounds[rounds["is_final"]]
    for r in final.itertuples():
        applied = {_norm_filter(f, units) for f in json.loads(r.applied_filters or "[]") if f.get("field") not in entitlement}
        expected = expected_by_turn[(r.session_id, r.turn_index)]
        for f in applied | expected:
            c = counts.setdefault((r.arm_id, f[0]), [0, 0, 0])  # true positive, applied, expected
            c[0] += f in applied and f in expected
            c[1] += f in applied
            c[2] += f in expected
    rows = [{"arm_id": arm, "field": field, "applied": c[1], "expected": c[2],
             "precision": c[0] / c[1] if c[1] else np.nan, "recall": c[0] / c[2] if c[2] else np.nan}
            for (arm, field), c in counts.items()]
    return pd.DataFrame(rows, columns=["arm_id", "field", "applied", "expected", "precision", "recall"])
