"""Each arm's own spread, for the report's plot bands and headline: per metric and turn bucket
(1, 2, 3, 4+, and all turns) the mean of the arm's per-turn values (repeats averaged, unmeasured
turns left out) with a session-level bootstrap 95% CI. No pairing: this is one arm's uncertainty;
differences between arms are the paired comparisons' (harness.metrics.paired). Computed by the
scoring step into the run folder (its `spread` table); the report only reads it."""
from __future__ import annotations

import pandas as pd

from harness.metrics.aggregate import turn_values
from harness.metrics.registry import headline, judged
from harness.metrics.segments import BUCKETS, bucket
from harness.metrics.stats import session_bootstrap_ci

COLUMNS = ["arm_id", "metric", "bucket", "mean", "lo", "hi", "n", "n_sessions"]
N_RESAMPLES = 1000


def point(values: pd.DataFrame, n_resamples: int = N_RESAMPLES) -> tuple[float, float, float]:
    """(mean, lo, hi) of per-turn values (session_id, turn_index, value): a session bootstrap."""
    frame = pd.DataFrame({"session_id": values["session_id"].to_numpy(), "turn_index": values["turn_index"].to_numpy(),
                          "a": 0.0, "b": values["value"].to_numpy(float)})
    mean, lo, hi = session_bootstrap_ci(frame, n_resamples=n_resamples, seed=0)
    return float(mean), float(lo), float(hi)


def spread_metrics(settings: dict | None) -> list[str]:
    """The metrics whose spread scoring writes: the run's headline ranking metrics and the judged ones."""
    return headline(settings) + judged()


def spread_table(per_turn: pd.DataFrame, metrics=None, n_resamples: int = N_RESAMPLES,
                 settings: dict | None = None) -> pd.DataFrame:
    """One row per arm, metric and bucket ("1", "2", "3", "4+", "all") that has a measured turn;
    `metrics`: spread_metrics(settings) unless given."""
    metrics = metrics or spread_metrics(settings)
    t = turn_values(per_turn[per_turn["metric"].isin(metrics)], ("arm_id", "metric", "session_id", "turn_index"))
    t = t.assign(bucket=t["turn_index"].map(bucket))
    rows = []
    for (arm, metric), g in t.groupby(["arm_id", "metric"], sort=False):
        for b, part in [*((b, g[g["bucket"] == b]) for b in BUCKETS), ("all", g)]:
            if len(part):
                rows.append([arm, metric, b, *point(part, n_resamples), len(part), part["session_id"].nunique()])
    return pd.DataFrame(rows, columns=COLUMNS)
