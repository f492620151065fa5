"""Answers from the final row of arms that answer or ask back: answered and abstained (their
good direction depends on the segment: on unanswerable turns abstaining is right), clarified,
and abstention precision and recall against the answerability labels (UNANSWERABLE and
UNDERSPECIFIED should be abstained; ANSWERABLE and PARTIAL answered):
precision = abstained and should / abstained, recall = abstained and should / should."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from harness.metrics.kernel import Long, Scoring, present
from harness.metrics.registry import Template, family
from harness.unmeasured import Unmeasured

SHOULD_ABSTAIN = {"UNANSWERABLE", "UNDERSPECIFIED"}

TEMPLATES = [
    Template("answered", "none", "rate", "1 when the arm answered (its good direction depends on the segment)",
             needs=("answers",), reads=("answer", "abstained")),
    Template("abstained", "none", "rate", "1 when the arm abstained (right on unanswerable turns, wrong on answerable)",
             needs=("answers",), reads=("answer", "abstained")),
    Template("clarified", "none", "rate", "1 when the rewrite asked back instead of only rewriting",
             needs=("asks_back",), reads=("clarify",)),
]


@family("answers", TEMPLATES, order=30)
def answer_rows(s: Scoring) -> Long:
    tr, G = s.tr, s.groups
    t = tr.t
    na, clar = present(t.column("not_applicable")), present(t.column("clarify"))
    has_answer = np.asarray(pc.is_valid(t.column("answer")), dtype=bool)
    abst = np.asarray(pc.fill_null(t.column("abstained"), False), dtype=bool)
    answer_failed = np.asarray(pc.fill_null(pc.match_substring(t.column("fallback_reason"), "answer failed"), False),
                               dtype=bool)
    c = {x: s.codes(x) for x in ("clarified", "answered", "abstained")}
    out = []
    for fi in G.final.tolist():
        if na[fi]:
            continue
        key = (tr.arm[fi], tr.rep[fi], tr.sess[fi], tr.tix[fi])
        out.append((*key, c["clarified"], float(clar[fi]), None))  # kept for arms that ask back (compute.py)
        if has_answer[fi]:
            out.append((*key, c["answered"], float(not abst[fi]), None))
            out.append((*key, c["abstained"], float(abst[fi]), None))
        elif answer_failed[fi]:  # the answer call failed: unmeasured, not dropped
            out.append((*key, c["answered"], np.nan, Unmeasured.ANSWER_FAILED.value))
            out.append((*key, c["abstained"], np.nan, Unmeasured.ANSWER_FAILED.value))
    return Long.from_rows(out)


UNLABELLED = "(unlabelled)"


def abstention_table(per_turn: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """Per arm: measured turns `n`, `abstained`, abstention precision and recall overall, and per
    answerability label (turns without one under UNLABELLED) `abstain_rate[LABEL]`, `n[LABEL]` and
    `abstained[LABEL]`; every arm has every label's columns (n 0 and rate NaN where it has no turn).
    Unmeasured turns (a failed answer) are left out."""
    ab = per_turn[per_turn["metric"] == "abstained"].dropna(subset=["value"])
    ab = ab.merge(labels[["session_id", "turn_index", "answerability"]], on=["session_id", "turn_index"])
    ab = ab.assign(answerability=ab["answerability"].fillna(UNLABELLED).astype(str))
    names = sorted(set(ab["answerability"]))
    rows = []
    for arm, g in ab.groupby("arm_id", sort=False):
        should = g["answerability"].isin(SHOULD_ABSTAIN)
        did = g["value"] >= 0.5
        tp = int((did & should).sum())
        row = {"arm_id": arm, "n": len(g), "abstained": int(did.sum()),
               "precision": tp / int(did.sum()) if did.any() else np.nan,
               "recall": tp / int(should.sum()) if should.any() else np.nan}
        per = {lab: (int(len(gl)), int((gl["value"] >= 0.5).sum())) for lab, gl in g.groupby("answerability")}
        for lab in names:
            n, k = per.get(lab, (0, 0))
            row[f"abstain_rate[{lab}]"] = k / n if n else np.nan
        for lab in names:
            row[f"n[{lab}]"], row[f"abstained[{lab}]"] = per.get(lab, (0, 0))
        rows.append(row)
    return pd.DataFrame(rows)
