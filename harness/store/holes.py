"""The holes of a run: the documents in the top k of a final ranking that the turn's labels do not
hold. One definition for the step that asks an LLM to grade them (harness/steps/relevance.py) and for
the scoring that adds those grades to people's (harness/metrics/qrels.py: only grades of the
traces' holes count), so it is part of the scoring code's version (harness/metrics/provenance.py)."""
from __future__ import annotations

import json
from typing import Iterable

from harness.store.folder import RunFolder
from harness.store.traces import read_traces


def holes(folder: RunFolder, turns: dict, depth: int) -> dict[tuple[str, int, str], list[str]]:
    """(session, turn, document) -> arms, for every document in the top `depth` of a final
    ranking that the turn's labels do not hold. `turns`: (session, turn) -> a mapping with the
    turn's `qrels` (JSON), for the turns people labelled."""
    rows = read_traces(folder.path, ["arm_id", "session_id", "turn_index", "is_final", "ranking"]).to_pylist()
    out: dict[tuple[str, int, str], set] = {}
    for r in rows:
        key = (r["session_id"], int(r["turn_index"]))
        lab = turns.get(key)
        if not r["is_final"] or lab is None:
            continue
        judged = json.loads(lab["qrels"] or "{}")
        for d in (r["ranking"] or [])[:depth]:
            if d not in judged:
                out.setdefault((*key, d), set()).add(r["arm_id"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def top_grade(qrels: Iterable[str | None]) -> int:
    """The highest grade people gave in these turns' qrels (JSON), 1 when they gave none: the eval
    set's scale, which an LLM's mapped grades must stay within."""
    return max((int(g) for q in qrels for g in json.loads(q or "{}").values()), default=1)
