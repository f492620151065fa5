"""`harness show RUN SESSION [TURN]`: the drill-down of one turn in a terminal, read from a run
folder: the user's turn and its relevant documents, then per arm (by label) the queries it issued
in each round, the filters it applied, its top hits with their relevance grades, its answer or
abstention, its failure, and its values of the headline metrics. Lines wrap between words within
the console (harness.report.fit), so it reads at 80 and at 120 columns. Load and render only."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.markup import escape

from harness.errors import BadInput
from harness.yamlpos import did_you_mean

TOP = 5  # hits shown per arm
COLUMNS = ["arm_id", "repeat", "session_id", "turn_index", "round", "is_final", "issued_queries", "applied_filters",
           "filter_violations", "ranking", "verdict", "verdict_reason", "fallback_reason", "not_applicable", "answer",
           "abstained", "error", "llm_failed"]


@dataclass
class ArmView:
    """What one arm did on the turn (its final row and its rounds)."""

    label: str
    rounds: list[tuple[int, list[str]]] = field(default_factory=list)  # (round, queries issued)
    filters: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    hits: list[tuple[int, str, int | None]] = field(default_factory=list)  # (rank, doc id, grade or None)
    answer: str | None = None
    abstained: bool = False
    failure: str | None = None
    not_applicable: str | None = None
    verdicts: list[str] = field(default_factory=list)
    scores: list[tuple[str, float | None, str | None]] = field(default_factory=list)  # (metric, value, unmeasured)


@dataclass
class TurnView:
    run: str
    session: str
    turn: int
    turns: list[int]
    user: str
    relevant: list[tuple[str, int]]
    arms: list[ArmView]


def _pick(name: str, what: str, known: list, hint: str) -> None:
    if name not in known:
        listed = ", ".join(map(str, known[:12])) + (" …" if len(known) > 12 else "")
        raise BadInput(f"{what} {name!r} is not in this run{did_you_mean(name, known)} ({hint}: {listed})")


def _filters(raw) -> list[str]:
    if not isinstance(raw, str) or not raw:
        return []
    out = []
    for f in json.loads(raw):
        v = f.get("value")
        out.append(f"{f.get('field')} {f.get('op', '=')} {', '.join(map(str, v)) if isinstance(v, list) else v}")
    return out


def _text(v) -> str | None:
    """A cell as text; None for a missing one (None, NaN, NA, empty)."""
    return None if v is None or pd.isna(v) or v == "" else str(v)


def _arm(label: str, rows: pd.DataFrame, qrels: dict[str, int], scores) -> ArmView:
    rows = rows.sort_values("round")
    final = rows[rows["is_final"]].iloc[-1] if rows["is_final"].any() else rows.iloc[-1]
    a = ArmView(label, scores=scores)
    a.rounds = [(int(r["round"]), list(r["issued_queries"] if r["issued_queries"] is not None else []))
                for _, r in rows.iterrows()]
    a.filters = _filters(final["applied_filters"])
    a.violations = list(final["filter_violations"]) if final["filter_violations"] is not None else []
    ranking = list(final["ranking"]) if final["ranking"] is not None else []
    a.hits = [(i, d, qrels.get(d)) for i, d in enumerate(ranking[:TOP], 1)]
    a.answer, a.abstained = _text(final["answer"]), final["abstained"] is True or final["abstained"] == True  # noqa: E712
    failed = 0 if pd.isna(final["llm_failed"]) else int(final["llm_failed"])
    a.failure = _text(final["error"]) or (f"{failed} LLM call(s) failed after their retries" if failed else None)
    a.not_applicable = _text(final["not_applicable"])
    if len(rows) > 1 or _text(final["verdict"]):
        a.verdicts = [f"round {int(r['round'])}: {r['verdict']}" + (f" ({r['verdict_reason']})" if _text(r["verdict_reason"]) else "")
                      for _, r in rows.iterrows() if _text(r["verdict"])]
    return a


def _scores(per_turn: pd.DataFrame | None, arm_id: str, names: list[str]) -> list:
    if per_turn is None:
        return []
    sub = per_turn[per_turn["arm_id"] == arm_id].set_index("metric")
    out = []
    for m in names:
        if m in sub.index:
            r = sub.loc[m] if isinstance(sub.loc[m], pd.Series) else sub.loc[m].iloc[0]
            value = None if pd.isna(r["value"]) else float(r["value"])
            out.append((m, value, _text(r["unmeasured"])))
    return out


def turn_view(run_dir: Path, session: str, turn: int | None, arms: list[str] | None = None) -> TurnView:
    """The turn `turn` (default: the session's first labelled turn) of `session`, for the arms
    named (labels or ids; default: every arm); unknown names are BadInput with a suggestion."""
    from harness.metrics.registry import coverage, headline
    from harness.store.folder import TURN_COLUMNS, RunData
    from harness.store.traces import read_part
    from harness.store.turns import turn_rows

    run = RunData.load(run_dir, scored=False)
    labels = run.labels
    sessions = list(dict.fromkeys(labels["session_id"]))
    _pick(session, "session", sessions, "its sessions")
    turns = sorted(int(t) for t in labels.loc[labels["session_id"] == session, "turn_index"])
    turn = turns[0] if turn is None else turn
    if turn not in turns:
        raise BadInput(f"session {session!r} has no labelled turn {turn} (its turns: {', '.join(map(str, turns))})")
    lab = labels[(labels["session_id"] == session) & (labels["turn_index"] == turn)].iloc[0]
    qrels = json.loads(lab["qrels"]) if isinstance(lab["qrels"], str) else {}
    by_label = {a.label: a.arm_id for a in run.arms}
    chosen = list(by_label)
    if arms:
        ids = {v: k for k, v in by_label.items()}
        for a in arms:
            if a not in ids:
                _pick(a, "arm", list(by_label), "its arms")
        chosen = [a if a in by_label else ids[a] for a in arms]
    t = pd.concat([read_part(p, COLUMNS, run_dir, [("session_id", "=", session)]).to_pandas() for p in
                   run.folder.parts()] or [pd.DataFrame(columns=COLUMNS)], ignore_index=True)  # one session's rows
    t = t[(t["session_id"] == session) & (t["turn_index"] == turn) & (t["repeat"] == 0)]
    names = headline(run.manifest.metrics) + coverage(run.manifest.metrics)[:1]
    per_turn = None
    if run.scored:  # the row groups of the metrics file that can hold the session (harness.store.turns)
        per_turn = turn_rows(run.folder, names, TURN_COLUMNS, session)
        per_turn = per_turn[(per_turn["turn_index"] == turn) & (per_turn["repeat"] == 0)]
    views = [_arm(label, t[t["arm_id"] == by_label[label]], qrels, _scores(per_turn, by_label[label], names))
             for label in chosen if (t["arm_id"] == by_label[label]).any()]
    relevant = sorted(((d, int(g)) for d, g in qrels.items() if g >= 1), key=lambda x: (-x[1], x[0]))
    return TurnView(run.name, session, turn, turns, str(lab["user"]), relevant, views)


def _mark(grade: int | None) -> str:
    """A hit's relevance: its grade when judged relevant, `0` judged not relevant, `?` unjudged."""
    return "\\[?] unjudged" if grade is None else f"\\[{grade}] " + ("relevant" if grade >= 1 else "not relevant")


def lines(v: TurnView) -> list[str]:
    """The view as lines of rich markup (the caller wraps them to the console)."""
    out = [f"[bold]{escape(v.run)}[/bold] · session {escape(v.session)} · turn {v.turn} of "
           f"{', '.join(map(str, v.turns))}",
           f"user: {escape(v.user)}",
           "relevant: " + (", ".join(f"{escape(d)} \\[{g}]" for d, g in v.relevant) or "none labelled")]
    for a in v.arms:
        out.append("")
        out.append(f"[bold]── {escape(a.label)}[/bold]")
        if a.not_applicable:
            out.append(f"  n/a: {escape(a.not_applicable)}")
        for r, qs in a.rounds:
            where = f"round {r} " if len(a.rounds) > 1 else ""
            out += [f"  {where}query: {escape(q)}" for q in qs] or [f"  {where}query: (none issued)"]
        out.append("  filters: " + (escape("; ".join(a.filters)) if a.filters else "none"))
        if a.violations:
            out.append(f"  [red]filter violations:[/red] {escape('; '.join(map(str, a.violations)))}")
        out += [f"  {escape(x)}" for x in a.verdicts]
        out.append(f"  top {TOP}:" + ("" if a.hits else " (empty ranking)"))
        out += [f"    {rank}. {escape(d)} {_mark(g)}" for rank, d, g in a.hits]
        if a.answer or a.abstained:
            out.append("  answer: " + ("(abstained)" if a.abstained else escape(a.answer)))
        if a.failure:
            out.append(f"  [red]failed:[/red] {escape(a.failure)}")
        if a.scores:
            out.append("  " + " · ".join(f"{m} {'—' if x is None else f'{x:.3f}'}" + (f" ({escape(u)})" if u else "")
                                         for m, x, u in a.scores))
    return out
