"""Per-session drill-down, the counterfactual view: every session (in pages, each session
collapsed), sessions where the arms disagree most first (ties by id), turn by turn, every arm side
by side (its rounds' queries and verdicts, filters, top hits, answer, scores) beside the turn's
labels and relevant documents, with titles and text from the eval set's corpus (the run folder's
manifest names it: RunFolder.eval_set_path). Turns carry what the page's CSS-only filters select:
arms disagree (their recall@10 or nDCG@10 differ, or their top-5 lists do), and for a candidate
run of a verdict block, the candidate regressed (an arm's recall@10 or nDCG@10 below its paired
baseline arm's on that turn, as the verdict block's per-turn values say).

A large run's drill-down holds a sample (issue 45): the sessions where the arms disagree most, those
where the candidate regressed and those with a failed turn (each capped), and, when sessions are left
over, a sample of them drawn by a hash of their ids; past those it lists LISTED sessions by id and counts the rest,
which `harness show RUN SESSION TURN` reaches. Only the sampled sessions' traces are read in full."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.evalset.folder import CORPUS
from harness.report.drillcells import compact
from harness.report.format import as_list, filter_text, fmt, loads, missing, shown_path, text
from harness.report.limits import DRILL_SESSIONS, LISTED, SAMPLE_FAILED, SAMPLE_RANDOM, TOP_HITS
from harness.report.load import ReportRun, session_traces

PAGE_SIZE = 20  # sessions per page (a <details> each; the first open)


def corpus_root(run: ReportRun) -> Path | None:
    """The eval set folder of the run when it holds a corpus."""
    root = run.folder.eval_set_path(run.manifest)
    return root if root is not None and (root / CORPUS).is_file() else None


def corpus_docs(root: Path | None, doc_ids: set[str], snippet: int = 160) -> dict[str, dict]:
    """Title and the start of the text of the given documents (streamed; other lines skipped); a
    text that opens with its title (and a full stop) is shown from after it."""
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
                t, title = str(d.get("text") or "").lstrip(), str(d.get("title") or "")
                if title and t.startswith(title):
                    t = t[len(title):].lstrip(" .:\n")
                out[did] = {"title": title,
                            "snippet": t[:snippet] + ("…" if len(t) > snippet else "")}
                if len(out) == len(doc_ids):
                    break
    return out


def turn_disagreement(run: ReportRun) -> pd.Series:
    """Per (session_id, turn_index): how much the arms disagree (spread of recall@10 across arms,
    plus half that of ndcg@10, plus distinct top-5 lists beyond the first / 10); 0 where they agree."""
    parts = []
    for m, w in zip(run.headline[:2], (1.0, 0.5)):
        tv = run.turn_values(m)
        if not tv.empty:
            g = tv.groupby(["session_id", "turn_index"])["value"]
            parts.append(w * (g.max() - g.min()))
    tr = run.traces
    if not tr.empty:  # `top`: a key of each row's top hits (harness.report.load.load_traces)
        fin = tr[tr["is_final"] & (tr["repeat"] == tr["repeat"].min())]
        parts.append(0.1 * (fin.groupby(["session_id", "turn_index"], observed=True)["top"].nunique() - 1))
    if not parts:
        return pd.Series(dtype=float)
    return pd.concat(parts, axis=1).fillna(0.0).sum(axis=1).round(6)  # ties by session id, not by float noise


def disagreement(run: ReportRun, per_turn: pd.Series | None = None) -> pd.DataFrame:
    """Per session: the sum of its turns' disagreement, most first, ties by session id."""
    per_turn = turn_disagreement(run) if per_turn is None else per_turn
    score = pd.Series(0.0, index=pd.Index(sorted(set(run.labels["session_id"])), name="session_id"))
    if len(per_turn):
        score = score.add(per_turn.groupby(level=0).sum(), fill_value=0.0).round(6)
    score.index.name = "session_id"
    return score.rename("score").reset_index().sort_values(["score", "session_id"], ascending=[False, True])


def against_baseline(turns: list[dict]) -> tuple[dict, set]:
    """For a candidate run, from its verdict block's per-turn values (harness.analysis.verdict):
    (candidate arm, session, turn) -> {metric: (baseline value, worse)}, and the (session, turn)
    keys where some arm is worse than its paired baseline arm."""
    cells: dict[tuple, dict] = {}
    regressed: set = set()
    for t in turns:
        key = (t["session_id"], int(t["turn_index"]))
        cells.setdefault((t["candidate_arm"], *key), {})[t["metric"]] = (fmt(t["baseline"]), bool(t["worse"]))
        if t["worse"]:
            regressed.add(key)
    return cells, regressed


@dataclass
class Drill:
    """What the turns of one run's drill-down are built from."""
    run: ReportRun
    by_key: dict  # (arm, session, turn) -> its trace rows, by round
    docs: dict  # doc_id -> title, snippet
    scores: dict  # (arm, session, turn) -> {metric: value text}
    entitlement: set  # filter fields the account sets
    disagree: set  # (session, turn) where the arms disagree
    score_names: list = field(default_factory=list)  # the metrics of `scores`, in their order
    base: dict = field(default_factory=dict)  # (arm, session, turn) -> {metric: (baseline value, worse)}
    regressed: set = field(default_factory=set)  # (session, turn) where the candidate regressed


def _scores(d: Drill, arm: str, key: tuple) -> list[dict]:
    """An arm's scores on a turn in the order of the run's score names ([] when none is measured),
    each with its paired baseline arm's value when there is one."""
    base, mine = d.base.get((arm, *key), {}), d.scores.get((arm, *key), {})
    if not mine:
        return []
    return [{"metric": m, "value": mine.get(m, "—"), "baseline": base.get(m, (None, False))[0],
             "worse": base.get(m, (None, False))[1]} for m in d.score_names]


def found_text(found: list[str], arms: list[dict]) -> str:
    """The arms that have a relevant document in their top hits, in the fewest words."""
    shown = [a["label"] for a in arms if not a["missing"]]
    if not found:
        return "no arm"
    if len(found) == len(shown):
        return "every arm"
    rest = [lab for lab in shown if lab not in found]
    return f"every arm but {', '.join(rest)}" if len(rest) < len(found) else ", ".join(found)


def _arm_cell(d: Drill, arm: str, key: tuple, relevant: dict[str, int]) -> dict:
    """One arm on one turn: its rounds (trace rows, sorted by round), final hits, answer, scores."""
    rows = d.by_key.get((arm, *key))
    if not rows:
        return {"label": d.run.label[arm], "arm": arm, "missing": True}
    final = rows[-1]
    rounds = [{"round": int(r["round"]), "queries": [str(q) for q in as_list(r["issued_queries"])],
               "verdict": text(r["verdict"]),
               "verdict_reason": text(r["verdict_reason"])} for r in rows]
    hits = [{"doc_id": str(x), "relevant": x in relevant,
             "title": (d.docs.get(x) or {}).get("title", "")} for x in as_list(final["ranking"])[:TOP_HITS]]
    clarify = loads(final["clarify"], None)
    return {
        "label": d.run.label[arm], "arm": arm, "missing": False, "rounds": rounds, "multi_round": len(rounds) > 1,
        "filters": [{"text": filter_text(f), "account": f.get("field") in d.entitlement}
                    for f in loads(final["applied_filters"], []) if isinstance(f, dict)],
        "filters_removed": [str(x) for x in as_list(final["filters_removed"])],
        "violations": [str(x) for x in as_list(final["filter_violations"])],
        "verdict": text(final["verdict"]), "verdict_reason": text(final["verdict_reason"]),
        "fallback": text(final["fallback_reason"]), "not_applicable": text(final["not_applicable"]),
        "error": text(final["error"]), "turn_class": text(final["turn_class"]),
        "clarify": json.dumps(clarify, ensure_ascii=False) if clarify else None,
        "hits": hits,
        "answer": text(final["answer"]), "abstained": None if missing(final["abstained"]) else bool(final["abstained"]),
        "scores": _scores(d, arm, key),
    }


def _account_filters(arms: list[dict]) -> list[str]:
    """The account's filters when every arm applied the same ones (said once for the turn, and
    left out of the arms' cells); [] otherwise."""
    present = [a for a in arms if not a["missing"]]
    sets = {tuple(f["text"] for f in a["filters"] if f["account"]) for a in present}
    if len(sets) != 1 or not next(iter(sets)):
        return []
    for a in present:
        a["filters"] = [f for f in a["filters"] if not f["account"]]
    return list(next(iter(sets)))


def _turn(d: Drill, lab: dict) -> dict:
    """One labelled turn of a session: its labels, relevant documents and every arm's cell."""
    key = (lab["session_id"], int(lab["turn_index"]))
    qrels = {str(x): int(g) for x, g in loads(lab["qrels"], {}).items()}
    relevant = {x: g for x, g in qrels.items() if g >= 1}
    arms = [_arm_cell(d, a, key, relevant) for a in d.run.arms]
    account = _account_filters(arms)  # first: the arms' cells then leave them out
    found = {x: [c["label"] for c in arms if not c["missing"] and x in {h["doc_id"] for h in c["hits"]}]
             for x in relevant}
    user = text(lab["user"]) or ""
    rows = compact(arms, user, set(relevant))
    return {
        "turn_index": key[1], "user": user, "query_type": text(lab.get("query_type")),
        "language": text(lab.get("language")), "answerability": text(lab.get("answerability")),
        "reference_rewrite": text(lab.get("reference_rewrite")),
        "identifiers": [str(i) for i in as_list(lab.get("identifiers"))],
        "expected_filters": [filter_text(f) for f in loads(lab.get("expected_filters"), []) if isinstance(f, dict)],
        "qrels_measured": bool(lab.get("qrels_measured", True)),
        "relevant": [{"doc_id": x, "grade": g, "title": (d.docs.get(x) or {}).get("title", ""),
                      "snippet": (d.docs.get(x) or {}).get("snippet", ""), "found_by": found_text(found[x], arms)}
                     for x, g in sorted(relevant.items(), key=lambda x: (-x[1], x[0]))],
        "account_filters": account, "arms": arms, "rows": rows,
        "disagree": key in d.disagree, "regressed": key in d.regressed,
    }


def turn_scores(run: ReportRun, sessions: set[str] | None = None) -> dict[tuple, dict]:
    """(arm, session, turn) -> {metric: value text} of the run's headline recall and nDCG and the judged
    metrics, as shown (repeats averaged); of `sessions` only, when given."""
    out: dict[tuple, dict] = {}
    for m in run.headline[:2] + run.judged:
        tv = run.turn_values(m)  # column by column: itertuples built a row of every column per turn
        tv = tv if sessions is None else tv[tv["session_id"].astype(str).isin(sessions)]
        for arm, sid, turn, value in zip(tv["arm_id"], tv["session_id"], tv["turn_index"], tv["value"]):
            out.setdefault((arm, sid, turn), {})[m] = fmt(value)
    return out


def _by_key(run: ReportRun, sessions: set[str]) -> tuple[dict, int]:
    """The trace rows of the first repeat of `sessions` by (arm, session, turn), rounds in order."""
    tr = session_traces(run.folder, sessions)
    rep0 = int(tr["repeat"].min()) if not tr.empty else 0
    by_key: dict[tuple, list[dict]] = {}
    for r in tr[tr["repeat"] == rep0].sort_values("round").to_dict("records"):
        by_key.setdefault((r["arm_id"], r["session_id"], int(r["turn_index"])), []).append(r)
    return by_key, rep0


def _docs(run: ReportRun, by_key: dict, sessions: set[str]) -> tuple[dict, Path | None]:
    needed = set()
    for q in run.labels.loc[run.labels["session_id"].astype(str).isin(sessions), "qrels"]:
        needed |= set(loads(q, {}))
    for rows in by_key.values():
        for r in rows:
            needed |= {str(x) for x in as_list(r["ranking"])[:TOP_HITS]}
    root = corpus_root(run)
    return corpus_docs(root, needed), root


def _preview(first: str) -> str:
    return first[:90] + ("…" if len(first) > 90 else "")


def labels_by_session(labels: pd.DataFrame) -> dict[str, list[dict]]:
    """Each session's label rows (dicts), turns in order: one to_dict of the whole table (one per
    session built a frame and iterated its columns each time)."""
    out: dict[str, list[dict]] = {}
    for lab in labels.sort_values(["session_id", "turn_index"]).to_dict("records"):
        out.setdefault(lab["session_id"], []).append(lab)
    return out


@dataclass
class Sample:
    """The sessions a drill-down shows turn by turn (in `order`'s order), lists by id, and counts."""
    full: list[str]
    listed: list[str]
    counted: int = 0
    random: int = 0  # of `full`, drawn by the hash of its id
    failed: int = 0  # of `full`, there for a failed turn


def _hashed(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def sample(order: pd.DataFrame, limit: int, regressed: set, failed: set) -> Sample:
    """The first `limit` sessions of `order` (0: all), every one where the candidate regressed and
    every one with a failed turn (the first DRILL_SESSIONS and SAMPLE_FAILED of them), then, when
    more than LISTED sessions are left, SAMPLE_RANDOM of those drawn by hash; the next
    LISTED are listed, the rest counted. The draw: the sessions whose ids hash lowest (sha256), a
    sample that is the same in every run and report of the same sessions."""
    ids = order["session_id"].astype(str).tolist()
    if not limit:
        return Sample(ids, [])
    full = set(ids[:limit]) | set([i for i in ids if i in regressed][:DRILL_SESSIONS])
    extra = [i for i in ids if i in failed and i not in full][:SAMPLE_FAILED]
    full |= set(extra)
    rest = [i for i in ids if i not in full]
    drawn: list[str] = []
    if len(rest) > LISTED:
        drawn = sorted(rest, key=_hashed)[:SAMPLE_RANDOM]
        full |= set(drawn)
        rest = [i for i in rest if i not in full]
    return Sample([i for i in ids if i in full], rest[:LISTED], max(0, len(rest) - LISTED), len(drawn), len(extra))


def _sessions(d: Drill, order: pd.DataFrame, chosen: Sample) -> tuple[list[dict], list[dict]]:
    """(sessions shown turn by turn, sessions listed only): the sample's, in the order's order."""
    by_session = labels_by_session(d.run.labels[d.run.labels["session_id"].astype(str).isin(
        set(chosen.full) | set(chosen.listed))])
    score = dict(zip(order["session_id"].astype(str), order["score"]))
    full, rest = [], []
    for sid in chosen.listed:
        labs_s = by_session.get(sid, [])
        rest.append({"session_id": sid, "score": f"{score[sid]:.2f}", "n_turns": len(labs_s),
                     "preview": _preview((text(labs_s[0]["user"]) or "") if labs_s else "")})
    for sid in chosen.full:
        turns = [_turn(d, lab) for lab in by_session.get(sid, [])]
        full.append({"session_id": sid, "score": f"{score[sid]:.2f}", "turns": turns,
                     "n_disagree": sum(t["disagree"] for t in turns), "n_regressed": sum(t["regressed"] for t in turns),
                     "preview": _preview(turns[0]["user"] if turns else "")})
    return full, rest


def failed_sessions(run: ReportRun) -> set[str]:
    """Sessions with a final trace row that records an error."""
    tr = run.traces
    if tr.empty:
        return set()
    bad = tr[tr["is_final"].astype(bool) & tr["error"].map(lambda x: text(x) is not None)]
    return set(bad["session_id"].astype(str))


def _pages(sessions: list[dict], size: int) -> list[dict]:
    out = []
    for i in range(0, len(sessions), size):
        part = sessions[i:i + size]
        out.append({"first": i + 1, "last": i + len(part), "sessions": part,
                    "n_disagree": sum(s["n_disagree"] for s in part), "n_regressed": sum(s["n_regressed"] for s in part)})
    return out


def build(run: ReportRun, against: tuple[str, list[dict]] | None = None,
          page_size: int = PAGE_SIZE, sessions: int = DRILL_SESSIONS) -> dict:
    """The run's sessions in pages, turn by turn, every arm side by side (repeat 0 of multi-repeat
    runs): the first `sessions` of them (0: all) and every one where the candidate regressed; the
    others listed by id. `against`: the baseline run's key and the per-turn values of the verdict
    block this run is the candidate of. The page's ids are made from the run's key and the session
    ids by the template (harness.report.interactive.anchor)."""
    per_turn = turn_disagreement(run)
    order = disagreement(run, per_turn)
    d = Drill(run, {}, {}, {}, set(), set(per_turn[per_turn > 0].index))
    if against is not None:
        d.base, d.regressed = against_baseline(against[1])
    chosen = sample(order, sessions, {k[0] for k in d.regressed}, failed_sessions(run))
    wanted = set(chosen.full)
    d.by_key, rep0 = _by_key(run, wanted)
    d.docs, root = _docs(run, d.by_key, wanted)
    d.entitlement = {f.get("field") for f in run.manifest.filter_schema if f.get("kind") == "entitlement"}
    d.scores = turn_scores(run, wanted)
    d.score_names = [m for m in run.headline[:2] + run.judged if any(m in v for v in d.scores.values())]
    shown, rest = _sessions(d, order, chosen)
    return {"pages": _pages(shown, page_size), "total": len(shown) + len(rest) + chosen.counted,
            "page_size": page_size, "repeat": rep0,
            "rest": rest, "n_rest_turns": sum(s["n_turns"] for s in rest), "n_shown": len(shown),
            "counted": chosen.counted, "sample_said": _said(chosen, run),
            "n_turns": sum(len(s["turns"]) for s in shown),
            "n_disagree": sum(s["n_disagree"] for s in shown), "n_regressed": sum(s["n_regressed"] for s in shown),
            "baseline": against[0] if against is not None else None, "score_names": d.score_names,
            "arms": [{"label": run.label[a], "arm": a} for a in run.arms],
            "repeats": run.manifest.repeats, "corpus": shown_path(root) if root else None}


def _said(chosen: Sample, run: ReportRun) -> str:
    """What the sample is, in words (empty when every session is shown or listed)."""
    if not chosen.counted and not chosen.random and not chosen.failed:
        return ""
    parts = [f"{chosen.failed} with a failed turn"] if chosen.failed else []
    parts += [f"{chosen.random} drawn from the sessions past them (those whose ids hash lowest)"] if chosen.random else []
    tail = (f"; {chosen.counted} more sessions are neither shown nor listed (harness show {run.dir.name} SESSION "
            "TURN shows any turn)") if chosen.counted else ""
    return f"A sample: the sessions where the arms disagree most, {', '.join(parts)}{tail}."
