"""Comparisons on arrays over the labelled turns (issue 45 item 3): an arm's turn means, a segment and
the turns a candidate lost are positions among the baseline's labelled turns, read an arm at a
time; they equal what the per-turn frames and sets of (session, turn) keys gave."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from harness.analysis.evidence import lost_turns
from harness.analysis.label_rows import ArmMeans, LabelRows
from harness.analysis.split import Split
from harness.metrics.segments import segment_keys
from harness.metrics.stats import _turn_means
from harness.store.folder import RunData
from harness.store.turns import TURNS_KEPT
from tests.conftest import ROOT

BASELINE = ROOT / "runs/baselines/b2b"


def _labels() -> pd.DataFrame:
    # sessions out of text order, turn indexes out of order, a session whose id sorts before the others
    return pd.DataFrame({"session_id": ["s10", "s10", "s2", "s2", "s2", "a1"],
                         "turn_index": [2, 1, 3, 1, 2, 1], "query_type": ["x", "y", "y", "x", "y", "x"]})


def _rows() -> pd.DataFrame:
    """Per-turn rows of one arm: repeats (one NaN), a turn with every repeat NaN, a turn without a
    label row, rows out of key order, session ids as categoricals."""
    rows = pd.DataFrame({"arm_id": "a", "metric": "m",
                         "session_id": ["s2", "s10", "s10", "s2", "zz", "s2", "s2", "a1", "a1"],
                         "turn_index": [3, 1, 1, 1, 1, 2, 2, 1, 1],
                         "repeat": [0, 0, 1, 0, 0, 0, 1, 0, 1],
                         "value": [0.5, 0.1, np.nan, 0.3, 0.9, np.nan, np.nan, 0.25, 0.75]})
    return rows.astype({"session_id": "category"})


def _want(rows: pd.DataFrame, labels: pd.DataFrame, segment: str) -> pd.Series:
    keys = segment_keys(labels, segment)
    means = _turn_means(rows, "m", "a")
    return means[[k in keys for k in zip(means.index.get_level_values(0).astype(str),
                                        means.index.get_level_values(1))]]


@pytest.mark.parametrize("segment", ["all", "turn_index>=2", "query_type=x", "query_type=y & turn_index>=2"])
def test_turn_means_over_labelled_turns_equal_the_frames(segment):
    labels, rows = _labels(), _rows()
    where = LabelRows(labels)
    got = ArmMeans(where, rows).series(where.mask(segment))
    want = _want(rows, labels, segment)
    assert [str(s) for s in got.index.get_level_values(0)] == [str(s) for s in want.index.get_level_values(0)]
    assert list(got.index.get_level_values(1)) == list(want.index.get_level_values(1))
    assert np.array_equal(got.to_numpy(), want.to_numpy(), equal_nan=True)
    assert ("zz", 1) not in set(zip(got.index.get_level_values(0), got.index.get_level_values(1)))


def test_an_arm_without_rows_has_no_means():
    where = LabelRows(_labels())
    assert ArmMeans(where, _rows().iloc[:0]).series(where.mask("all")).empty
    assert where.positions(pd.Series(["nope", "s2"]), np.array([1, 9])).tolist() == [-1, -1]
    none = LabelRows(_labels().iloc[:0])  # an eval set without a labelled turn: nothing is compared
    assert none.positions(pd.Series(["s2"]), np.array([1])).tolist() == [-1]
    assert ArmMeans(none, _rows()).series(none.mask("all")).empty


def _keys_lost(b: pd.DataFrame, c: pd.DataFrame, keys: set) -> tuple[int, int]:
    """What lost_turns counted with sets of (session, turn) keys before it counted positions."""
    def turns(df):
        return set(zip(df["session_id"].astype(str), df["turn_index"])) & keys
    measured = turns(b[b["value"].notna()])
    unm = c[c["value"].isna() & c["unmeasured"].notna()]
    return len((turns(unm) - turns(c[c["value"].notna()])) & measured), len(measured)


@pytest.mark.parametrize("segment", ["all", "turn_index>=2"])
def test_lost_turns_by_position_count_what_the_key_sets_counted(segment):
    labels, b = _labels(), _rows()
    c = b.assign(value=[np.nan, 0.1, np.nan, np.nan, np.nan, 0.2, np.nan, np.nan, np.nan],
                 unmeasured=["error", None, "error", "declined", "error", None, "error", "error", "declined"])
    run = RunData.__new__(RunData)
    run.labels = labels
    lost = lost_turns(run, run, "a", "a", "m", segment, (b, c))
    assert (lost.n, lost.of) == _keys_lost(b, c, segment_keys(labels, segment))
    if segment == "all":  # s2 turn 3 (error), s2 turn 1 (declined), a1 turn 1 (error, its first reason)
        assert lost.n == 3 and lost.reasons == {"error": 2, "declined": 1}


def test_a_run_keeps_the_rows_of_its_last_metrics_only(tmp_path):
    """A reader that asks metric after metric (the gate: every metric of its policy, in both runs)
    held every one of them: a month's run holds millions of rows per metric."""
    run = tmp_path / "b2b"
    shutil.copytree(BASELINE, run)
    data = RunData.load(run, scored=False)
    metrics = sorted(data.metrics)[:6]
    for m in metrics:
        assert len(data.turns([m])) > 0
    assert len(data._turns) == TURNS_KEPT and set(data._turns) == set(metrics[-TURNS_KEPT:])
    both = data.turns(metrics[:3])  # more asked at once than kept: all of them, then the last ones kept
    assert set(both["metric"].astype(str)) == set(metrics[:3])
    arm = data.arms[0].arm_id
    read = data.arm_turns("ndcg@10", arm)  # from its row groups: ndcg@10 is not kept
    assert "ndcg@10" not in data._turns and set(read["arm_id"].astype(str)) == {arm}
    full = data.turns(["ndcg@10"])
    kept = data.arm_turns("ndcg@10", arm)  # from the kept rows
    want = full[(full["arm_id"] == arm).to_numpy(bool)]
    for got in (read, kept):
        assert len(got) == len(want) > 0 and np.array_equal(got["value"], want["value"], equal_nan=True)
        assert list(got["session_id"].astype(str)) == list(want["session_id"].astype(str))


def test_split_reads_an_arm_at_a_time_and_keeps_means_not_rows(tmp_path):
    run = tmp_path / "b2b"
    shutil.copytree(BASELINE, run)
    data = RunData.load(run, scored=False)
    split = Split(data, data)
    arm = data.arms[0].arm_id
    got = split.of("ndcg@10", "A:" + arm, split.keys("turn_index>=2"))
    rows = data.turns(["ndcg@10"])
    want = _turn_means(rows, "ndcg@10", arm)
    keys = segment_keys(data.labels, "turn_index>=2")
    want = want[[k in keys for k in zip(want.index.get_level_values(0).astype(str), want.index.get_level_values(1))]]
    assert np.array_equal(got.to_numpy(), want.to_numpy(), equal_nan=True) and len(got) > 100
    assert not any(isinstance(v, pd.DataFrame) for v in vars(split).values())

