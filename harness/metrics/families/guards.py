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
from harness.metrics.kernel import Long, Scoring, encode, present
from harness.metrics.registry import Template, family

TEMPLATES = [
    Template("identifier_preservation", "higher", "share", "identifiers the user typed kept verbatim in every issued "
             "query", needs=("queries",), reads=("issued_queries", "labels.identifiers")),
    Template("identifier_dropped", "lower", "rate", "1 when an identifier the user typed is missing from an issued "
             "query", needs=("queries",), reads=("issued_queries", "labels.identifiers")),
    Template("filter_precision", "higher", "share", "applied preference filters that were expected / applied",
             needs=("replayed",), reads=("applied_filters", "labels.expected_filters")),
    Template("filter_recall", "higher", "share", "expected filters that were applied / expected",
             needs=("replayed",), reads=("applied_filters", "labels.expected_filters")),
    Template("entitlement_violations", "lower", "count", "entitlement fields a model proposed (always rejected)",
             needs=("proposes_filters",), reads=("filter_violations",)),
    Template("wrong_filter_zero_relevant", "lower", "rate", "an unexpected filter applied and no relevant document "
             "in the top 10", needs=("replayed",), reads=("applied_filters", "ranking", "labels.qrels")),
]


def _norm_filter(f: dict, units: dict[str, str | None]) -> tuple:
    v = f.get("value")
    unit = units.get(f.get("field"))
    if isinstance(v, list):
        v = tuple(sorted(str(normalise_value(unit, x)) for x in v))
    else:
        v = normalise_value(unit, v)
        v = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v).strip().lower()
    return (f.get("field"), f.get("op", "eq"), v)


class _Inputs:
    """The label and trace lookups of the guard metrics, built once per run."""

    def __init__(self, s: Scoring):
        tr, G = s.tr, s.groups
        self.entitlement = {f["field"] for f in s.schema if f.get("kind") == "entitlement"}
        units = {f["field"]: f.get("unit") for f in s.schema}
        L = s.lab.df
        self.ids_of = [[i for i in (list(ids) if ids is not None else []) if i in (u or "")]
                       for ids, u in zip(L["identifiers"].to_numpy(object), L["user"].astype(object).to_numpy(object))]
        self.expected = [{_norm_filter(f, units) for f in json.loads(e or "[]")} for e in L["expected_filters"].astype(object)]
        self.na = present(tr.t.column("not_applicable"))
        self.acode, avals = encode(tr.t.column("applied_filters"))
        self.applied = [{_norm_filter(f, units) for f in json.loads(a or "[]") if f.get("field") not in self.entitlement}
                        for a in avals] + [set()]
        self.viol = tr.list_lengths("filter_violations")
        fin = G.final
        self.fli = G.li[fin]
        self.top10 = (s.lab.grades(self.fli, tr.prefix(fin, 10)) > 0).any(axis=1) if len(fin) else np.zeros(0, bool)
        need = [g for g in range(len(G)) if self.fli[g] >= 0 and self.ids_of[self.fli[g]] and not self.na[fin[g]]]
        qrows = np.concatenate([G.rows(g) for g in need]) if need else np.zeros(0, np.int64)
        self.queries = dict(zip(qrows.tolist(), tr.issued_queries(qrows)))


@family("guards", TEMPLATES, order=50)
def guard_rows(s: Scoring) -> Long:
    tr, G, x = s.tr, s.groups, _Inputs(s)
    c = {m: s.codes(m) for m in ("identifier_preservation", "identifier_dropped", "filter_precision", "filter_recall",
                                 "entitlement_violations", "wrong_filter_zero_relevant")}
    out = []
    for g, fi in enumerate(G.final.tolist()):
        a_code = tr.arm[fi]
        if x.na[fi]:
            continue
        r = x.fli[g]
        if r < 0:
            raise KeyError((tr.sessions[tr.sess[fi]], int(tr.tix[fi])))
        key = (a_code, tr.rep[fi], tr.sess[fi], tr.tix[fi])
        ids = x.ids_of[r]
        if ids:
            p = preserved(ids, [q for row in G.rows(g).tolist() for q in (x.queries[row] or [])])
            out.append((*key, c["identifier_preservation"], p, None))
            out.append((*key, c["identifier_dropped"], float(p < 1), None))
        a, e = x.applied[x.acode[fi]], x.expected[r]
        if a:
            out.append((*key, c["filter_precision"], len(a & e) / len(a), None))
        if e:
            out.append((*key, c["filter_recall"], len(a & e) / len(e), None))
        out.append((*key, c["entitlement_violations"], float(x.viol[fi]), None))
        if s.lab.n_rel[r] and (a - e):
            out.append((*key, c["wrong_filter_zero_relevant"], float(not x.top10[g]), None))
    return Long.from_rows(out)


def filter_fields_table(rounds: pd.DataFrame, labels: pd.DataFrame, schema: list[dict]) -> pd.DataFrame:
    """Precision and recall per filter field and arm (micro-averaged over turns)."""
    entitlement = {f["field"] for f in schema if f.get("kind") == "entitlement"}
    units = {f["field"]: f.get("unit") for f in schema}
    cols = (labels[c].tolist() for c in ("session_id", "turn_index", "expected_filters"))  # not a scalar per cell
    expected_by_turn = {(sid, tix): {_norm_filter(f, units) for f in json.loads(ef or "[]")} for sid, tix, ef in zip(*cols)}
    counts: dict[tuple, list[int]] = {}
    final = rounds[rounds["is_final"]]
    parsed: dict[str | None, set] = {}  # a run's turns apply a few distinct filter lists: each parsed once
    for arm, sid, tix, text in zip(*(final[c].tolist() for c in ("arm_id", "session_id", "turn_index",
                                                                  "applied_filters"))):
        if text not in parsed:
            parsed[text] = {_norm_filter(f, units) for f in json.loads(text or "[]") if f.get("field") not in entitlement}
        applied = parsed[text]
        expected = expected_by_turn[(sid, tix)]
        for f in applied | expected:
            c = counts.setdefault((arm, f[0]), [0, 0, 0])  # true positive, applied, expected
            c[0] += f in applied and f in expected
            c[1] += f in applied
            c[2] += f in expected
    rows = [{"arm_id": arm, "field": field, "applied": c[1], "expected": c[2],
             "precision": c[0] / c[1] if c[1] else np.nan, "recall": c[0] / c[2] if c[2] else np.nan}
            for (arm, field), c in sorted(counts.items())]  # an order that does not hang on set iteration
    return pd.DataFrame(rows, columns=["arm_id", "field", "applied", "expected", "precision", "recall"])


def merge_filter_fields(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """filter_fields_table over the whole run from its tables of session groups: counts added, true
    positives taken back from each table's precision (or recall) times its count."""
    cols = ["arm_id", "field", "applied", "expected", "precision", "recall"]
    tables = [t for t in tables if len(t)]
    if not tables:
        return pd.DataFrame(columns=cols)
    t = pd.concat(tables, ignore_index=True)
    tp = np.where(t["applied"] > 0, t["precision"].fillna(0) * t["applied"], t["recall"].fillna(0) * t["expected"])
    t = t.assign(tp=np.rint(tp).astype(np.int64)).groupby(["arm_id", "field"], sort=True)[["tp", "applied", "expected"]].sum()
    t = t.reset_index()
    t["precision"] = np.where(t["applied"] > 0, t["tp"] / t["applied"].where(t["applied"] > 0, 1), np.nan)
    t["recall"] = np.where(t["expected"] > 0, t["tp"] / t["expected"].where(t["expected"] > 0, 1), np.nan)
    return t[cols]
