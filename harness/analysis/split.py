"""Two runs' per-turn values as a comparison reads them: an arm's rows of a metric at a time, from
that arm's own row groups of its run's metrics file, and each (metric, arm)'s turn means kept as
arrays over the baseline's labelled turns (harness.analysis.label_rows), so that comparing a month's
runs holds a few numbers per turn and (metric, arm) compared, never every arm's rows of every metric
(issue 45). Arms are named `A:arm` (the baseline's) and `B:arm` (the candidate's)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.pairing import Pair
from harness.analysis.label_rows import ArmMeans, LabelRows
from harness.metrics.stats import TurnMeans
from harness.store.folder import TURN_COLUMNS, RunData
from harness.store.turns import categorical, concat


def prefixed(arms: pd.Series, prefix: str) -> pd.Categorical:
    """Arm ids with the side they come from (`A:`, `B:`) in front."""
    cat = pd.Categorical(arms)
    return cat.rename_categories([prefix + str(c) for c in cat.categories])


class Split(TurnMeans):
    """As TurnMeans, each arm's turn means of a metric are computed once for every segment and check
    that compares them (`of`), and each segment is found once (`keys`: a mask over the labelled
    turns, which `of` takes in place of a set of turn keys). The means cover the baseline's labelled
    turns: the turns every comparison is restricted to."""

    def __init__(self, base: RunData, cand: RunData):
        self.base, self.cand = base, cand
        self.where = LabelRows(base.labels)
        self._arm_means: dict[tuple[str, str], ArmMeans] = {}

    def rows_of(self, metric: str, arm: str) -> pd.DataFrame:
        """The per-turn rows of `metric` of a side's arm (`A:arm` or `B:arm`), their arm ids as the
        run has them."""
        run = self.base if arm.startswith("A:") else self.cand
        return run.arm_turns(metric, arm[2:])

    def of(self, metric: str, arm: str, segment_keys=None) -> pd.Series:
        """The arm's turn means of `metric` on the labelled turns (of the segment `keys` gave, when
        given)."""
        if (metric, arm) not in self._arm_means:
            self._arm_means[(metric, arm)] = ArmMeans(self.where, self.rows_of(metric, arm))
        return self._arm_means[(metric, arm)].series(segment_keys)

    def keys(self, segment) -> np.ndarray:
        """The segment's labelled turns, as a mask `of` takes."""
        return self.where.mask(segment)

    def sides(self, pair: Pair, metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The rows of `metric` of the pair's baseline arm and of its candidate arm."""
        return self.rows_of(metric, "A:" + pair.baseline.arm_id), self.rows_of(metric, "B:" + pair.candidate.arm_id)

    def pair_rows(self, pair: Pair, metric: str) -> pd.DataFrame:
        """Both sides' rows of `metric` in one table, arms as `A:arm` and `B:arm`."""
        a, b = self.sides(pair, metric)
        cols = [c for c in TURN_COLUMNS if c in a and c in b]
        return concat([categorical(t[cols].assign(arm_id=prefixed(t["arm_id"], p))) for t, p in ((a, "A:"), (b, "B:"))])
