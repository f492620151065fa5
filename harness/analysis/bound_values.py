"""What a floor or budget cannot judge among the candidate's values, said before any statistic:
turns the baseline's arm measured, and the candidate's holds, with no value and no reason for it
(a metric the candidate stopped measuring fails, never n/a: what is not measured cannot pass),
and values that are not finite (an infinite latency is named as such, never a `p95 nan`).
Turns left unmeasured with a recorded reason (declined, an error) are harness.analysis.evidence's
lost turns."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.pairing import Pair
from harness.metrics.segments import segment_keys
from harness.store.folder import RunData


def _rows(run: RunData, arm_id: str, metric: str, keys: set) -> pd.DataFrame:
    pt = run.turns([metric])
    rows = pt[pt["arm_id"] == arm_id]
    inside = [k in keys for k in zip(rows["session_id"], rows["turn_index"])]
    return rows[np.asarray(inside, bool)] if len(rows) else rows


def _turns(rows: pd.DataFrame) -> set:
    return set(zip(rows["session_id"], rows["turn_index"]))


def _example(turns) -> str:
    s, t = sorted(turns)[0]
    return f"e.g. session {s} turn {int(t)}"


def missing_values(base: RunData, cand: RunData, pair: Pair, metric: str, segment: str,
                   max_lost_rate: float) -> tuple[str | None, str | None]:
    """(why the check fails, what to say beside its result): the turns the baseline's arm measured
    on which the candidate's arm has no value and no reason recorded for it."""
    keys = segment_keys(base.labels, segment)
    b = _rows(base, pair.baseline.arm_id, metric, keys)
    f = cand.evidence.finals
    held = _turns(f[f["arm_id"] == pair.candidate.arm_id])  # coverage: subset compares only what both hold
    measured = _turns(b[b["value"].notna().to_numpy(bool)]) & held
    if not measured:
        return None, None
    c = _rows(cand, pair.candidate.arm_id, metric, keys)
    valued = c[c["value"].notna().to_numpy(bool)]
    reasoned = c[(c["value"].isna() & c["unmeasured"].notna()).to_numpy(bool)] if "unmeasured" in c else c.iloc[:0]
    gone = measured - _turns(valued) - _turns(reasoned)
    if not gone:
        return None, None
    said = (f"{len(gone)} of {len(measured)} turns the baseline measured have no {metric} value in {cand.name} "
            f"and no reason recorded ({_example(gone)})")
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
            f"{_example(inf.index)})") if len(inf) else f"{len(bad)} turn(s) hold a {metric} that is not a number"
    return f"{what}: a value that is not finite is a broken measurement, so it cannot be within a bound"
