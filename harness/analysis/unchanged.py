"""Arms a change left alone, found once for every reader that pairs arms (harness compare, the gate,
the report's verdict blocks): a pair whose per-turn values are equal on every quality metric both
runs measured (the same turns measured, every value within the tie tolerance of the statistics), so
that a reader says them in one line (`6 arms unchanged: identical rankings on every turn (…)`)
instead of rows of `+0.000 [+0.000, +0.000] p 1.000`. The reason is `identical rankings on every
turn` when the two arms' final trace rows are the same as well (ranking, answer, abstention, n/a,
failure, on every turn and repeat), else `every difference exactly zero`. Operational metrics
(latency, cost, calls) are left out here: they vary between identical replays, and a table that
shows them keeps their rows (`collapse`)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from harness.analysis.final_rows import answered, final_rows, same_rows
from harness.analysis.pairing import Pair
from harness.metrics.registry import resolve
from harness.store.folder import RunData

IDENTICAL = "identical rankings on every turn"
IDENTICAL_ANSWERS = "identical rankings and answers on every turn"
ZERO = "every difference exactly zero"
TOL = 1e-12  # as a tie of wins/ties/losses (harness.metrics.stats.wins_ties_losses)
TURN = ["repeat", "session_id", "turn_index"]


def _same_values(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """One arm's per-turn rows of a metric against another's: the same turns, equal values (NaN,
    an unmeasured turn, equal to NaN)."""
    if len(a) != len(b):
        return False
    if not len(a):
        return True
    if not _same_turns(a, b):  # rows in the per-turn table's key order as a rule; else sorted once
        a, b = a.sort_values(TURN), b.sort_values(TURN)
        if not _same_turns(a, b):
            return False
    return bool(np.allclose(a["value"].to_numpy(float), b["value"].to_numpy(float), rtol=0, atol=TOL,
                            equal_nan=True))


def _same_turns(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return all(np.array_equal(a[c].to_numpy(), b[c].to_numpy()) for c in TURN)


def _quality(base: RunData, cand: RunData) -> list[str]:
    return sorted(m for m in base.metrics & cand.metrics if not resolve(m).operational)


def _identical(base: RunData, cand: RunData, pairs: list[Pair]) -> dict[str, str]:
    """label -> IDENTICAL (or IDENTICAL_ANSWERS) for the pairs whose final trace rows are the same."""
    tb = final_rows(base, {p.baseline.arm_id for p in pairs})
    tc = tb if cand.path.resolve() == base.path.resolve() else final_rows(cand, {p.candidate.arm_id for p in pairs})
    out = {}
    for p in pairs:
        a = tb.filter(pc.equal(tb["arm_id"], p.baseline.arm_id))
        b = tc.filter(pc.equal(tc["arm_id"], p.candidate.arm_id))
        if same_rows(a, b):
            out[p.label] = IDENTICAL_ANSWERS if answered(a) else IDENTICAL
    return out


def unchanged(base: RunData, cand: RunData, pairs: list[Pair], split) -> dict[str, str]:
    """label -> why the pair is unchanged, for the pairs whose every quality metric is equal turn by
    turn; `split`: harness.analysis.compare.Split of the two runs (its rows by metric and arm)."""
    metrics = _quality(base, cand)
    zero = [p for p in pairs if all(_same_values(*split.sides(p, m)) for m in metrics)]
    if not zero:
        return {}
    same = _identical(base, cand, zero)
    return {p.label: same.get(p.label, ZERO) for p in zero}


def collapse(table: pd.DataFrame, found: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Of `found` (candidate run -> label -> reason), the labels whose every measured row of `table`
    (a comparison table: candidate_run, label, n_turns, wins, losses) is a tie on every turn: an
    operational metric that moved keeps its label's rows."""
    out: dict[str, dict[str, str]] = {}
    for run, labels in found.items():
        for label, why in labels.items():
            rows = table[(table["candidate_run"] == run) & (table["label"] == label) & (table["n_turns"] > 0)]
            if ((rows["wins"] == 0) & (rows["losses"] == 0)).all():
                out.setdefault(run, {})[label] = why
    return out


def said(labels: dict[str, str], what: str = "unchanged") -> str:
    """`6 arms unchanged: identical rankings on every turn (original, concat, …)`, a group per reason."""
    by: dict[str, list[str]] = {}
    for label, why in labels.items():
        by.setdefault(why, []).append(label)
    n = len(labels)
    return f"{n} arm{'s' if n != 1 else ''} {what}: " + "; ".join(f"{why} ({', '.join(names)})"
                                                                     for why, names in by.items())


def kept(table: pd.DataFrame, labels: dict[str, dict[str, str]]) -> pd.DataFrame:
    """The rows of a comparison table but those of the collapsed labels (candidate run -> labels)."""
    hide = {(run, label) for run, names in labels.items() for label in names}
    return table[[k not in hide for k in zip(table["candidate_run"], table["label"])]] if hide else table
