"""What a floor or budget cannot judge among the candidate's values, said before any statistic:
turns the baseline's arm measured, and the candidate's holds, with no value and no reason for it
(a metric the candidate stopped measuring fails, never n/a: what is not measured cannot pass),
and values that are not finite (an infinite latency is named as such, never a `p95 nan`).
Turns left unmeasured with a recorded reason (declined, an error) are harness.analysis.evidence's
lost turns."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.label_rows import LabelRows
from harness.analysis.pairing import Pair
from harness.store.folder import RunData


def _example(session, turn) -> str:
    return f"e.g. session {session} turn {int(turn)}"


def _first(where: LabelRows, positions: np.ndarray) -> str:
    """_example of the first of `positions` in key order."""
    first = int(np.min(positions))
    return _example(where.sessions[where.session[first]], where.turn[first])


def missing_values(base: RunData, cand: RunData, pair: Pair, metric: str, segment: str,
                   max_lost_rate: float, where: LabelRows | None = None) -> tuple[str | None, str | None]:
    """(why the check fails, what to say beside its result): the turns the baseline's arm measured
    on which the candidate's arm has no value and no reason recorded for it. Turns are positions
    among the baseline's labelled turns (`where`, harness.analysis.label_rows)."""
    where = LabelRows(base.labels) if where is None else where
    inside = where.mask(segment)

    def turns(df: pd.DataFrame, segment_only: bool = True) -> np.ndarray:
        pos = where.positions(df["session_id"], df["turn_index"])
        ok = (pos >= 0) & (inside[np.clip(pos, 0, None)] if segment_only else True) if len(pos) else pos >= 0
        return np.unique(pos[ok])

    b = base.arm_turns(metric, pair.baseline.arm_id)
    f = cand.evidence.finals
    held = turns(f[(f["arm_id"] == pair.candidate.arm_id).to_numpy(bool)], segment_only=False)  # coverage: subset
    measured = np.intersect1d(turns(b[b["value"].notna().to_numpy(bool)]), held)  # compares only what both hold
    if not len(measured):
        return None, None
    c = cand.arm_turns(metric, pair.candidate.arm_id)
    valued = c[c["value"].notna().to_numpy(bool)]
    reasoned = c[(c["value"].isna() & c["unmeasured"].notna()).to_numpy(bool)] if "unmeasured" in c else c.iloc[:0]
    gone = np.setdiff1d(measured, np.union1d(turns(valued), turns(reasoned)))
    if not len(gone):
        return None, None
    said = (f"{len(gone)} of {len(measured)} turns the baseline measured have no {metric} value in {cand.name} "
            f"and no reason recorded ({_first(where, gone)})")
    if not len(valued):
        return (f"{cand.name}'s {pair.label} no longer measures {metric}: {said}; what is not measured cannot "
                "pass"), None
    rate = len(gone) / len(measured)
    if rate > max_lost_rate:
        return (f"{said}: {rate:.1%} > max_lost_rate {max_lost_rate:.1%}; what is not measured is not compared, "
                "so it cannot pass"), None
    return None, f"{said}, left out"


def not_finite(values: pd.Series, metric: str) -> str | None:
    """Why values that are not finite cannot be held to a bound (infinite ones named), or None."""
    bad = values[~np.isfinite(values.to_numpy(np.float64))]
    if bad.empty:
        return None
    inf = bad[np.isinf(bad.to_numpy(np.float64))]
    what = (f"{len(inf)} turn(s) hold an infinite {metric} ({'+' if inf.iloc[0] > 0 else '-'}inf, "
            f"{_example(*sorted(inf.index)[0])})") if len(inf) else \
        f"{len(bad)} turn(s) hold a {metric} that is not a number"
    return f"{what}: a value that is not finite is a broken measurement, so it cannot be within a bound"
