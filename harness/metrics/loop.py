"""Metrics of multi-round arms (the corrective loop), from all rounds of the traces:

- rounds_used: rounds until the arm stopped;
- rescued: 1 when the first round's top-k hits miss every relevant document and the final
  round's hit one (turns with relevant documents only);
- wasted_rounds: rounds run after a round whose top-k hits already held a relevant document;
- recall_at_stop: recall of the final round's top-k hits;
- answered / abstained: 0/1 from the final row (answer metrics for every arm with answers);
- clarified: 1 when the rewrite asked back (`clarify`) instead of only rewriting (rewrite arms);
- abstention precision and recall against the answerability labels (UNANSWERABLE should be
  abstained; UNDERSPECIFIED clarified or abstained; ANSWERABLE and PARTIAL answered):
  precision = abstained and should / abstained, recall = abstained and should / should."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

SHOULD_ABSTAIN = {"UNANSWERABLE", "UNDERSPECIFIED"}
LOOP_COLUMNS = ["arm_id", "params", "repeat", "session_id", "turn_index", "round", "is_final", "ranking",
                "verdict", "abstained", "answer", "clarify", "not_applicable", "fallback_reason"]


def _topk(params: str) -> int | None:
    try:
        return int(json.loads(params).get("top_k"))
    except (TypeError, ValueError, AttributeError):
        return None


def per_turn_loop(rounds: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """Long rows (arm_id, repeat, session_id, turn_index, metric, value, unmeasured)."""
    rel = {(r.session_id, r.turn_index): {d for d, g in json.loads(r.qrels).items() if int(g) >= 1}
           for r in labels.itertuples()}
    out = []
    for (arm, rep, sid, tix), g in rounds.groupby(["arm_id", "repeat", "session_id", "turn_index"], sort=False):
        g = g.sort_values("round")
        final = g.iloc[-1]
        if isinstance(final["not_applicable"], str) and final["not_applicable"]:
            continue
        if "last_n" in (final["params"] or ""):  # the rewrite family can ask back instead of rewriting
            clar = final["clarify"]
            out.append((arm, rep, sid, tix, "clarified", float(isinstance(clar, str) and bool(clar)), None))
        has_answer = final["answer"] is not None and not (isinstance(final["answer"], float))
        fb = final["fallback_reason"]
        if has_answer:
            out.append((arm, rep, sid, tix, "answered", float(not bool(final["abstained"])), None))
            out.append((arm, rep, sid, tix, "abstained", float(bool(final["abstained"])), None))
        elif isinstance(fb, str) and "answer failed" in fb:  # the answer call failed: unmeasured, not dropped
            out.append((arm, rep, sid, tix, "answered", np.nan, "answer failed"))
            out.append((arm, rep, sid, tix, "abstained", np.nan, "answer failed"))
        k = _topk(final["params"])
        if k is None:  # not a loop arm
            continue
        out.append((arm, rep, sid, tix, "rounds_used", float(len(g)), None))
        relevant = rel.get((sid, tix), set())
        if not relevant:
            for m in ("rescued", "wasted_rounds", "recall_at_stop"):
                out.append((arm, rep, sid, tix, m, np.nan, "no relevant document"))
            continue
        hit = [bool(relevant & set(list(r)[:k])) for r in g["ranking"]]
        first_ok = next((i for i, h in enumerate(hit) if h), None)
        out.append((arm, rep, sid, tix, "rescued", float((not hit[0]) and hit[-1]), None))
        out.append((arm, rep, sid, tix, "wasted_rounds", float(len(g) - 1 - first_ok) if first_ok is not None else 0.0, None))
        out.append((arm, rep, sid, tix, "recall_at_stop",
                    len(relevant & set(list(g["ranking"].iloc[-1])[:k])) / len(relevant), None))
    return pd.DataFrame(out, columns=["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"])


def abstention_table(per_turn: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """Abstention precision/recall per arm overall and rates per answerability label."""
    ab = per_turn[per_turn["metric"] == "abstained"].merge(labels[["session_id", "turn_index", "answerability"]],
                                                            on=["session_id", "turn_index"])
    rows = []
    for arm, g in ab.groupby("arm_id", sort=False):
        should = g["answerability"].isin(SHOULD_ABSTAIN)
        did = g["value"] >= 0.5
        tp = int((did & should).sum())
        row = {"arm_id": arm, "n": len(g), "abstained": int(did.sum()),
               "precision": tp / int(did.sum()) if did.any() else np.nan,
               "recall": tp / int(should.sum()) if should.any() else np.nan}
        for label, gl in g.groupby("answerability"):
            row[f"abstain_rate[{label}]"] = float((gl["value"] >= 0.5).mean())
        rows.append(row)
    return pd.DataFrame(rows)
