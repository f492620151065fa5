"""The aggregates' p50/p95 and mean are computed without numpy's and pandas' per-call set-up; they
must be the very floats np.percentile and Series.mean give (the committed baseline's tables are
compared value for value)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.metrics.aggregate import _mean, _quantiles


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def _samples(rng: np.random.Generator):
    for n in range(1, 60):
        yield rng.random(n)
        yield rng.integers(0, 4, n) / 3  # ties, as rank metrics have
        yield np.round(rng.normal(size=n), 2)
    for _ in range(2000):
        n = int(rng.integers(1, 400))
        yield rng.random(n) * 10.0 ** int(rng.integers(-8, 8))
    for _ in range(3000):  # signed zeros in every mix (numpy's partition may pick either of two equal zeros)
        yield rng.choice(np.array([-0.0, 0.0, 1.0, -1.0]), int(rng.integers(1, 16)))
    for n in range(1, 12):  # a NaN anywhere: numpy answers NaN
        v = rng.random(n)
        v[int(rng.integers(0, n))] = np.nan
        yield v
    yield np.array([-0.0, -0.0, -0.0, 0.0, 0.0, -1.0, 1.0, -0.0, 0.0, -1.0, -0.0, 1.0, -0.0, 0.0])
    yield np.array([np.inf])
    yield np.array([1.0, np.inf])
    yield np.array([-np.inf, 0.5, np.inf])
    yield np.array([0.1, 0.2, 0.3] * 7)


def test_quantiles_equal_numpy_percentile_float_for_float():
    rng = np.random.default_rng(7)
    checked = 0
    with np.errstate(invalid="ignore"):
        for vals in _samples(rng):
            want = [float(x) for x in np.percentile(vals, [50.0, 95.0])]
            got = _quantiles(vals)
            assert all(_same(g, w) for g, w in zip(got, want)), (vals, got, want)
            checked += 1
    assert checked > 5000
    assert all(math.isnan(x) for x in _quantiles(np.array([])))


def test_mean_equals_pandas_series_mean():
    rng = np.random.default_rng(11)
    for vals in _samples(rng):
        if not np.isfinite(vals).all():
            continue
        assert _same(_mean(vals), float(pd.Series(vals).mean())), vals


def test_aggregates_of_a_spill_without_segments_are_none(tmp_path):
    """No segment asked for: no aggregate row (and no lookup into labels that may be empty)."""
    from harness.metrics.aggregate import Aggregator, TurnSpill

    labels = pd.DataFrame({"session_id": pd.Series([], dtype=str), "turn_index": pd.Series([], dtype=int)})
    spill = TurnSpill(labels, np.zeros(0, np.int64), tmp_path, "g0-")
    spill.add(pd.DataFrame({"arm_id": ["a"], "repeat": [0], "session_id": ["s"], "turn_index": [1],
                            "metric": ["m"], "value": [1.0], "unmeasured": [None]}))
    agg = Aggregator(labels, [], tmp_path)
    agg.merge(spill.files)
    assert agg.table(["m"], ["a"]).empty
