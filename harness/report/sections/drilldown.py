"""8. Per-session drill-down, the counterfactual view: sessions where the arms disagree most first
(ties by id), turn by turn, every arm side by side (its rounds' queries and verdicts, filters, top
hits, answer, scores) beside the turn's labels and relevant documents, with titles and text from
the eval set's corpus (the run folder's manifest names it: RunFolder.eval_set_path)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.report.format import as_list, filter_text, fmt, loads, missing, text
from harness.report.load import ReportRun

DRILL_CAP = 30
TOP_HITS = 5
CORPUS = "corpus.jsonl"  # of the eval set folder


def corpus_root(run: ReportRun) -> Path | None:
    """The eval set folder of the run when it holds a corpus."""
    root = run.folder.eval_set_path(run.manifest)
    return root if root is not None and (root / CORPUS).is_file() else None


def corpus_docs(root: Path | None, doc_ids: set[str], snippet: int = 240) -> dict[str, dict]:
    """Title and the start of the text of the given documents (streamed; other lines skipped)."""
    out: dict[str, dict] = {}
    if root is None or not doc_ids:
        return out
    with open(root / CORPUS, encoding="utf-8") as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            did = str(d.get("doc_id"))
            if did in doc_ids:
                t = str(d.get("text") or "")
                out[did] = {"title": str(d.get("title") or ""),
                            "snippet": t[:snippet] + ("…" if len(t) > snippet else "")}
                if len(out) == len(doc_ids):
                    break
    return out


def disagreement(run: ReportRun) -> pd.DataFrame:
    """Per session: how much the arms disagree (sum over turns of the spread of recall@10 across
    arms, plus half that of ndcg@10, plus distinct top-5 lists beyond the first / 10)."""
    score = pd.Series(0.0, index=pd.Index(sorted(set(run.labels["session_id"])), name="session_id"))
    for m, w in (("recall@10", 1.0), ("ndcg@10", 0.5)):
        tv = run.turn_values(m)
        if tv.empty:
            continue
        spread = tv.groupby(["session_id", "turn_index"])["value"].agg(lambda v: v.max() - v.min())
        score = score.add(w * spread.groupby(level="session_id").sum(), fill_value=0.0)
    tr = run.traces
    if not tr.empty:
        fin = tr[tr["is_final"] & (tr["repeat"] == tr["repeat"].min())]
        top = fin.assign(top=fin["ranking"].map(lambda r: tuple(as_list(r)[:TOP_HITS])))
        distinct = top.groupby(["session_id", "turn_index"])["top"].nunique() - 1
        score = score.add(0.1 * distinct.groupby(level="session_id").sum(), fill_value=0.0)
    score = score.round(6)  # ties by session id, not by float noise
    return score.rename("score").reset_index().sort_values(["score", "session_id"], ascending=[False, True])


def _arm_cell(run: ReportRun, arm: str, rows: list[dict] | None, relevant: dict[str, int], docs: dict,
              scores: dict, entitlement: set[str]) -> dict:
    """One arm on one turn: its rounds (trace rows, sorted by round), final hits, answer, scores."""
    if not rows:
        return {"label": run.label[arm], "arm": arm, "missing": True}
    final = rows[-1]
    rounds = [{"round": int(r["round"]), "queries": [str(q) for q in as_list(r["issued_queries"])],
               "verdict": text(r["verdict"]),
               "verdict_reason": text(r["verdict_reason"])} for r in rows]
    hits = [{"doc_id": str(d), "relevant": d in relevant,
             "title": (docs.get(d) or {}).get("title", "")} for d in as_list(final["ranking"])[:TOP_HITS]]
    clarify = loads(final["clarify"], None)
    return {
        "label": run.label[arm], "arm": arm, "missing": False, "rounds": rounds, "multi_round": len(rounds) > 1,
        "filters": [{"text": filter_text(f), "account": f.get("field") in entitlement}
                    for f in loads(final["applied_filters"], []) if isinstance(f, dict)],
        "filters_removed": [str(x) for x in as_list(final["filters_removed"])],
        "violations": [str(x) for x in as_list(final["filter_violations"])],
        "verdict": text(final["verdict"]), "verdict_reason": text(final["verdict_reason"]),
        "fallback": text(final["fallback_reason"]), "not_applicable": text(final["not_applicable"]),
        "error": text(final["error"]), "turn_class": text(final["turn_class"]),
        "clarify": json.dumps(clarify, ensure_ascii=False) if clarify else None,
        "hits": hits,
        "answer": text(final["answer"]), "abstained": None if missing(final["abstained"]) else bool(final["abstained"]),
        "scores": scores,
    }


def _turn(run: ReportRun, lab: dict, by_key: dict, docs: dict, turn_scores: dict, entitlement: set[str]) -> dict:
    """One labelled turn of a session: its labels, relevant documents and every arm's cell."""
    sid, tix = lab["session_id"], int(lab["turn_index"])
    qrels = {str(d): int(g) for d, g in loads(lab["qrels"], {}).items()}
    relevant = {d: g for d, g in qrels.items() if g >= 1}
    arms = [_arm_cell(run, a, by_key.get((a, sid, tix)), relevant, docs,
                      turn_scores.get((a, sid, tix), {}), entitlement) for a in run.arms]
    found = {d: [c["label"] for c in arms if not c["missing"] and d in {h["doc_id"] for h in c["hits"]}]
             for d in relevant}
    return {
        "turn_index": tix, "user": text(lab["user"]) or "", "query_type": text(lab.get("query_type")),
        "language": text(lab.get("language")), "answerability": text(lab.get("answerability")),
        "reference_rewrite": text(lab.get("reference_rewrite")),
        "identifiers": [str(i) for i in as_list(lab.get("identifiers"))],
        "expected_filters": [filter_text(f) for f in loads(lab.get("expected_filters"), []) if isinstance(f, dict)],
        "qrels_measured": bool(lab.get("qrels_measured", True)),
        "relevant": [{"doc_id": d, "grade": g, "title": (docs.get(d) or {}).get("title", ""),
                      "snippet": (docs.get(d) or {}).get("snippet", ""), "found_by": found[d]}
                     for d, g in sorted(relevant.items(), key=lambda x: (-x[1], x[0]))],
        "arms": arms,
    }


def _scores(run: ReportRun, chosen_ids: set) -> dict[tuple, dict]:
    """(arm, session, turn) -> {recall@10, ndcg@10} as shown (repeats averaged)."""
    turn_scores: dict[tuple, dict] = {}
    for m in ("recall@10", "ndcg@10"):
        tv = run.turn_values(m)
        tv = tv[tv["session_id"].isin(chosen_ids)]
        for r in tv.itertuples():
            turn_scores.setdefault((r.arm_id, r.session_id, r.turn_index), {})[m] = fmt(r.value)
    return turn_scores


def build(run: ReportRun, cap: int = DRILL_CAP) -> dict:
    """The sessions where the arms disagree most (up to `cap`), turn by turn, every arm side by
    side (repeat 0 of multi-repeat runs)."""
    order = disagreement(run)
    chosen = order.head(cap)
    tr = run.traces
    rep0 = int(tr["repeat"].min()) if not tr.empty else 0
    chosen_ids = set(chosen["session_id"])
    tr = tr[(tr["repeat"] == rep0) & tr["session_id"].isin(chosen_ids)]
    by_key: dict[tuple, list[dict]] = {}
    for r in tr.sort_values("round").to_dict("records"):
        by_key.setdefault((r["arm_id"], r["session_id"], int(r["turn_index"])), []).append(r)
    labs = run.labels[run.labels["session_id"].isin(chosen_ids)]
    turn_scores = _scores(run, chosen_ids)
    needed = set()
    for r in labs.itertuples():
        needed |= set(loads(r.qrels, {}))
    for rows in by_key.values():
        for r in rows:
            needed |= {str(d) for d in as_list(r["ranking"])[:TOP_HITS]}
    es_root = corpus_root(run)
    docs = corpus_docs(es_root, needed)
    entitlement = {f.get("field") for f in run.manifest.get("filter_schema") or [] if f.get("kind") == "entitlement"}
    sessions = []
    for s in chosen.itertuples():
        turns = [_turn(run, lab, by_key, docs, turn_scores, entitlement)
                 for lab in labs[labs["session_id"] == s.session_id].sort_values("turn_index").to_dict("records")]
        first = turns[0]["user"] if turns else ""
        sessions.append({"session_id": s.session_id, "score": f"{s.score:.2f}", "turns": turns,
                         "preview": first[:90] + ("…" if len(first) > 90 else "")})
    return {"sessions": sessions, "total": int(len(order)), "cap": cap, "repeat": rep0,
            "repeats": int(run.manifest.get("repeats") or 1), "corpus": str(es_root) if es_root else None}
