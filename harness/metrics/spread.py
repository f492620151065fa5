"""Each arm's own spread, for the report's plot bands and headline: per metric and turn bucket
(1, 2, 3, 4+, and all turns) the mean of the arm's per-turn values (repeats averaged, unmeasured
turns left out) with a session-level bootstrap 95% CI. No pairing: this is one arm's uncertainty;
differences between arms are the paired comparisons' (harness.metrics.paired). Computed by the
scoring step into the run folder (its `spread` table); the report only reads it."""
from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd

from harness.metrics.aggregate import groups, pair_codes, turn_values
from harness.metrics.registry import headline, judged
from harness.metrics.segments import BUCKETS, bucket
from harness.metrics.stats import KEY, STATS, check_columns, bootstrap_of_sums, session_sums

COLUMNS = ["arm_id", "metric", "bucket", "mean", "lo", "hi", "n", "n_sessions"]


def spread_metrics(settings: dict | None) -> list[str]:
    """The metrics whose spread scoring writes: the run's headline ranking metrics and the judged ones."""
    return headline(settings) + judged()


class SpreadSums:
    """spread_table fed a session group at a time (`add`): each (arm, metric, bucket)'s per-session
    sums and turn counts, bootstrapped once in `table`."""

    def __init__(self, metrics=None, n_resamples: int = STATS.spread_resamples, settings: dict | None = None):
        self.metrics = metrics or spread_metrics(settings)
        self.n_resamples = n_resamples
        self.parts: dict[tuple[str, str], dict[str, list]] = {}  # (arm, metric) -> bucket -> [sums, counts, n]

    def add(self, per_turn: pd.DataFrame) -> None:
        t = turn_values(per_turn[per_turn["metric"].isin(self.metrics)], ("arm_id", "metric", "session_id", "turn_index"))
        arm, metric, sess = (t[c].to_numpy(object) for c in ("arm_id", "metric", "session_id"))
        value, buckets = t["value"].to_numpy(float), t["turn_index"].map(bucket).to_numpy(object)
        for g in groups(pair_codes(arm, metric)):  # in order of appearance
            got = self.parts.setdefault((arm[g[0]], metric[g[0]]), {})
            for b, part in [*((b, g[buckets[g] == b]) for b in BUCKETS), ("all", g)]:
                if len(part):
                    sums, counts = session_sums(sess[part], value[part])
                    acc = got.setdefault(b, [[], [], 0])
                    acc[0].append(sums)
                    acc[1].append(counts)
                    acc[2] += len(part)

    def empty(self) -> "SpreadSums":
        """One of the same metrics with nothing fed yet (a session group scored in another process)."""
        out = copy.copy(self)
        out.parts = {}
        return out

    def merge(self, other: "SpreadSums") -> None:
        """What an `empty` one was fed: the next session group's sums."""
        for key, got in other.parts.items():
            mine = self.parts.setdefault(key, {})
            for b, (sums, counts, n) in got.items():
                acc = mine.setdefault(b, [[], [], 0])
                acc[0] += sums
                acc[1] += counts
                acc[2] += n

    def table(self) -> pd.DataFrame:
        rows = []
        for (arm, metric), got in self.parts.items():
            for b in (b for b in (*BUCKETS, "all") if b in got):
                sums, counts, n = np.concatenate(got[b][0]), np.concatenate(got[b][1]), got[b][2]
                mean, lo, hi = bootstrap_of_sums(sums, counts, self.n_resamples, STATS.alpha, STATS.seed)
                rows.append([arm, metric, b, float(mean), float(lo), float(hi), n, len(sums)])
        return pd.DataFrame(rows, columns=COLUMNS)


def spread_table(per_turn: pd.DataFrame, metrics=None, n_resamples: int = STATS.spread_resamples,
                 settings: dict | None = None) -> pd.DataFrame:
    """One row per arm, metric and bucket ("1", "2", "3", "4+", and "all") that has a measured turn;
    `metrics`: spread_metrics(settings) unless given. SpreadSums over one table."""
    sums = SpreadSums(metrics, n_resamples, settings)
    sums.add(per_turn)
    return sums.table()


def between_repeat_spread(per_turn: pd.DataFrame, metric: str, arm: str) -> float:
    """Mean over turns of the standard deviation (ddof=1) of the measured repeats of a turn.

    NaN repeats are ignored; only turns with at least two measured repeats enter the mean.
    0.0 when the arm has measured values but no turn has two measured repeats (e.g. one
    repeat); NaN when the arm has no measured value for the metric.
    """
    check_columns(per_turn)
    rows = per_turn[(per_turn["metric"] == metric) & (per_turn["arm_id"] == arm)]
    values = pd.to_numeric(rows["value"], errors="coerce").astype(float)
    measured = rows.assign(value=values).dropna(subset=["value"])
    if measured.empty:
        return math.nan
    grouped = measured.groupby(KEY)["value"]
    n = grouped.count()
    sd = grouped.std(ddof=1)[n >= 2]
    if sd.empty:
        return 0.0
    return float(sd.mean())
