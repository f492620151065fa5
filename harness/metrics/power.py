"""Power: the smallest difference an eval set can detect, and the sessions a margin would need.
Pure functions of a paired frame (columns ``session_id, a, b``); docs/statistics.md has the formula."""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from harness.defaults import STATS


def min_detectable_drop(frame: pd.DataFrame, alpha: float = STATS.alpha, power: float = STATS.power) -> float:
    """Smallest mean change this eval set can detect (two-sided level ``alpha``, given power).

    ``MDE = (z_{1-alpha/2} + z_{power}) * sd_session / sqrt(n_sessions)`` where ``sd_session``
    is the sample standard deviation (ddof=1) of the BASELINE's (``a``) per-session means over
    the paired turns: how much sessions differ from one another, which a change must stand out
    from. (The spread of the differences would say nothing for two identical runs.) Normal
    approximation; assumes independent sessions of roughly equal length and a change whose
    per-session effect varies about as much as the baseline's sessions do. NaN ("not
    estimable") with fewer than 2 sessions or no spread between them.
    """
    if frame.empty:
        return math.nan
    means = frame.groupby("session_id", sort=False)["a"].mean().to_numpy(float)
    n = len(means)
    if n < 2:
        return math.nan
    sd = float(np.std(means, ddof=1))
    if not sd > 0:
        return math.nan
    z = NormalDist().inv_cdf
    return (z(1 - alpha / 2) + z(power)) * sd / math.sqrt(n)


def sessions_needed(mde: float, n_sessions: int, margin: float) -> int | None:
    """About how many sessions would make `mde` (measured on `n_sessions`) as small as `margin`:
    the standard error falls as 1/sqrt(S), so S * (mde / margin)^2, rounded up. None when not estimable."""
    if not (mde == mde and margin > 0 and n_sessions > 0):
        return None
    return int(math.ceil(n_sessions * (mde / margin) ** 2))
