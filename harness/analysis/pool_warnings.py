"""What the judgment pool does not see (issue 29): a candidate whose judged@10 falls more than 0.05
below the baseline's on a segment (part of a difference in a ranking metric may then be unjudged
documents, counted as not relevant), and the hole report per arm (top-10 documents without a
judgment for their turn, and those of them judged relevant for another turn of the same session:
a cheap signal of pool bias). Reads scored runs' per-turn values; writes nothing."""
from __future__ import annotations

import math

import pandas as pd

from harness.metrics.families.pool import ELSEWHERE, HOLES, hole_sums, holes_rounded
from harness.metrics.segments import segment_keys

JUDGED = "judged@10"
GAP = 0.05  # a candidate's judged@10 lower than the baseline's by more than this is warned about
EPS = 1e-9
SAID = "part of this difference may be unjudged documents"


def _mean(run, arm_id: str, keys: set) -> float:
    pt = run.turns([JUDGED])
    pt = pt[pt["arm_id"] == arm_id].dropna(subset=["value"])
    inside = pd.MultiIndex.from_arrays([pt["session_id"], pt["turn_index"]]).isin(list(keys))
    v = pt[inside].groupby(["session_id", "turn_index"])["value"].mean()
    return float(v.mean()) if len(v) else math.nan


def judged_warnings(base, cand, pairs, segments: list[str]) -> list[str]:
    """One warning per paired arm label and segment where the candidate's mean judged@10 is lower
    than the baseline's by more than GAP (turns of the segment; repeats averaged per turn)."""
    if not base.scored or not cand.scored or JUDGED not in base.metrics or JUDGED not in cand.metrics:
        return []
    out = []
    for seg in dict.fromkeys(segments):
        keys = segment_keys(base.labels, seg)
        for p in pairs:
            b, c = _mean(base, p.baseline.arm_id, keys), _mean(cand, p.candidate.arm_id, keys)
            if not (math.isnan(b) or math.isnan(c)) and c < b - GAP - EPS:
                out.append(f"{p.label} [{seg}]: {JUDGED} is {c:.2f} in {cand.name} against {b:.2f} in the baseline "
                           f"{base.name} (lower by {b - c:.2f}, more than {GAP}): {SAID} (counted as not relevant)")
    return out


def holes_by_arm(per_turn: pd.DataFrame | None) -> dict[str, dict]:
    """arm -> {turns: measured turns, holes: top-10 documents without a judgment for their turn,
    relevant_elsewhere: of those, judged relevant for another turn of the session}, summed over
    turns (repeats averaged per turn); {} for a run scored without the hole metrics."""
    return holes_rounded(hole_sums(per_turn))



def holes_summary(holes: dict[str, dict], labels: dict[str, str]) -> str | None:
    """Every arm's holes in one note (a terminal's; the report gives each arm its sentence)."""
    if not holes:
        return None
    arms = ", ".join(f"{labels.get(a, a)} {h['holes']} ({h['relevant_elsewhere']})" for a, h in holes.items())
    return ("holes: top-10 documents without a judgment for their turn (of those, judged relevant for another turn of "
            f"the session; the pool may favour some arms): {arms}")


def holes_text(label: str, h: dict) -> str:
    return (f"{label}: {h['holes']} of the top-10 documents of {h['turns']} turn(s) have no judgment for their turn; "
            f"{h['relevant_elsewhere']} of those are judged relevant for another turn of the same session "
            "(the pool may favour some arms)")


def llm_labels_said(folder) -> str | None:
    """The LLM's part of the labels the folder's tables were scored with, in words; None when they
    were scored with people's labels alone (the evidence of compare and gate names only this)."""
    from harness.metrics.provenance import read_stamp
    from harness.metrics.qrels import scored_labels
    from harness.store.folder import RunFolderError

    try:
        _, llm = scored_labels(read_stamp(folder) if folder.has_metrics() else None)
    except RunFolderError:
        return None
    return None if llm is None else "relevance labels: people's, and an LLM's for the holes: " + llm.said()


def qrels_note(folder) -> str | None:
    """What `harness metrics` says of the labels: the LLM's part, or LLM grades the scoring did not
    use; None when there is nothing but people's labels."""
    from harness.metrics.qrels import read_relevance
    from harness.store.folder import RunFolderError

    said = llm_labels_said(folder)
    if said:
        return said
    try:
        rel = read_relevance(folder)
    except RunFolderError:
        rel = None
    n = int(((rel["purpose"] == "hole") & (rel["status"] == "ok")).sum()) if rel is not None else 0
    return f"relevance labels: people's only ({n} LLM grade(s) for holes not used: --qrels human+llm)" if n else None


def qrels_said(folder) -> str:
    """Which relevance labels the folder's tables were scored with, in words (the report's header
    and warnings)."""
    return qrels_note(folder) or "relevance labels: people's"


def agreement_said(folder) -> str | None:
    """Cohen's kappa of the LLM's relevance grades against people's (the scoring's agreement table)."""
    from harness.metrics.qrels import agreement

    a = agreement(folder.table("agreement"))
    return a.line() if a is not None else None
