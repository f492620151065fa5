"""harness.metrics.stats on constructed data with known answers: identical arms, a clear improvement,
session-level (not turn-level) resampling, Holm by hand, wins/ties/losses, oracle gap,
pairing with unmeasured turns and repeats, MDE, determinism."""
import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from harness.metrics.paired import oracle_gap_closed
from harness.metrics.spread import between_repeat_spread
from harness.metrics.stats import (STATS, Unmeasured, compare_arms, holm, min_detectable_drop, paired_frame,
                                   session_bootstrap_ci, session_randomization_test, wins_ties_losses)


def frame_of(rows):
    """rows: (session_id, turn_index, a, b)."""
    return pd.DataFrame(rows, columns=["session_id", "turn_index", "a", "b"])


def per_turn_of(rows, metric="ndcg@10"):
    """rows: (arm_id, repeat, session_id, turn_index, value)."""
    df = pd.DataFrame(rows, columns=["arm_id", "repeat", "session_id", "turn_index", "value"])
    df.insert(4, "metric", metric)
    return df


def improvement_frame(n_sessions=60, n_turns=3, shift=0.2, noise=0.02, seed=7):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_sessions):
        for t in range(n_turns):
            a = rng.uniform(0.2, 0.7)
            rows.append((f"s{s:03d}", t, a, a + shift + rng.normal(0, noise)))
    return frame_of(rows)


def test_identical_arms_p_one_and_zero_width_ci():
    rng = np.random.default_rng(3)
    vals = rng.uniform(0, 1, size=90)
    f = frame_of([(f"s{i // 3}", i % 3, v, v) for i, v in enumerate(vals)])
    diff, lo, hi = session_bootstrap_ci(f, n_resamples=2000)
    assert diff == 0.0 and lo == 0.0 and hi == 0.0
    assert lo <= 0 <= hi and hi - lo == 0
    assert session_randomization_test(f, n_permutations=2000) == 1.0


def test_clear_improvement_small_p_and_ci_around_shift():
    f = improvement_frame()
    diff, lo, hi = session_bootstrap_ci(f)
    assert diff == pytest.approx(0.2, abs=0.01)
    assert 0 < lo < diff < hi
    assert lo > 0.18 and hi < 0.22
    p = session_randomization_test(f)
    assert p < 0.001
    assert p == pytest.approx(1 / (1 + STATS.n_permutations))  # the Monte Carlo test's resolution (60 sessions)


def naive_turn_bootstrap_width(f, n_resamples=10000, alpha=0.05, seed=0):
    """What a turn-level bootstrap (turns treated as independent) would give."""
    d = (f["b"] - f["a"]).to_numpy()
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return hi - lo


def test_session_level_resampling_does_not_shrink_with_copied_turns():
    rng = np.random.default_rng(11)
    single = frame_of([(f"s{s:02d}", 0, a, a + d) for s, (a, d) in
                       enumerate(zip(rng.uniform(0.3, 0.6, 40), rng.normal(0.05, 0.3, 40)))])
    # every session's turn copied 4 times: same session_id, distinct turn_index
    copied = frame_of([(r.session_id, k, r.a, r.b) for r in single.itertuples() for k in range(4)])
    assert len(copied) == 160 and copied["session_id"].nunique() == 40

    _, lo1, hi1 = session_bootstrap_ci(single)
    _, lo4, hi4 = session_bootstrap_ci(copied)
    w1, w4 = hi1 - lo1, hi4 - lo4
    assert w1 > 0
    assert abs(w4 / w1 - 1) < 0.15  # copies carry no new information: width stays

    # a turn-level bootstrap would treat the 160 copies as independent and halve the width
    naive1, naive4 = naive_turn_bootstrap_width(single), naive_turn_bootstrap_width(copied)
    assert abs(naive1 / w1 - 1) < 0.15  # same thing when sessions have one turn
    assert naive4 / w1 < 0.65
    assert w4 / naive4 > 1.5  # so a turn-level implementation fails the first assertion

    # the session sign-flip test is likewise unmoved by the copies
    p1 = session_randomization_test(single)
    p4 = session_randomization_test(copied)
    assert p4 == pytest.approx(p1, abs=0.02)


def test_holm_by_hand():
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]) == []
    out = holm([0.01, float("nan"), 0.04])  # NaN ignored, m = 2
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def test_wins_ties_losses_by_hand():
    f = frame_of([("s1", 0, 0.5, 0.7), ("s1", 1, 0.5, 0.5), ("s2", 0, 0.9, 0.1),
                  ("s2", 1, 0.0, 1.0), ("s3", 0, 0.3, 0.3 + 1e-15)])
    assert wins_ties_losses(f) == (2, 2, 1)
    assert wins_ties_losses(f, direction="lower") == (1, 2, 2)  # lower is better: a drop is a win
    assert wins_ties_losses(f, direction="none") == (2, 2, 1)  # higher / tie / lower


def test_oracle_gap_closed():
    assert oracle_gap_closed(0.4, 0.5, 0.8) == pytest.approx(0.25)
    assert oracle_gap_closed(0.4, 0.8, 0.8) == pytest.approx(1.0)
    assert oracle_gap_closed(0.4, 0.3, 0.8) == pytest.approx(-0.25)
    assert oracle_gap_closed(0.4, 0.5, 0.4) is None
    assert oracle_gap_closed(0.4, 0.5, 0.4 + 1e-15) is None
    assert oracle_gap_closed(0.4, float("nan"), 0.8) is None


def test_paired_frame_counts_unmeasured_and_averages_repeats():
    nan = float("nan")
    pt = per_turn_of([
        # s1/0: both measured, two repeats each -> averaged
        ("original", 0, "s1", 0, 0.2), ("original", 1, "s1", 0, 0.4),
        ("rewrite", 0, "s1", 0, 0.6), ("rewrite", 1, "s1", 0, 1.0),
        # s1/1: one repeat NaN in rewrite -> mean of the measured one
        ("original", 0, "s1", 1, 0.5), ("original", 1, "s1", 1, 0.5),
        ("rewrite", 0, "s1", 1, nan), ("rewrite", 1, "s1", 1, 0.9),
        # s2/0: unmeasured in original
        ("original", 0, "s2", 0, nan), ("original", 1, "s2", 0, nan),
        ("rewrite", 0, "s2", 0, 0.3), ("rewrite", 1, "s2", 0, 0.3),
        # s2/1: unmeasured in both
        ("original", 0, "s2", 1, nan), ("rewrite", 0, "s2", 1, nan),
        # s3/0: no row at all for rewrite
        ("original", 0, "s3", 0, 0.7),
        # another arm and another metric must not leak in
        ("other", 0, "s1", 0, 0.0),
    ])
    pt = pd.concat([pt, per_turn_of([("original", 0, "s9", 0, 1.0), ("rewrite", 0, "s9", 0, 1.0)],
                                    metric="mrr@10")], ignore_index=True)
    frame, unmeasured = paired_frame(pt, "ndcg@10", "original", "rewrite")
    assert list(frame.columns) == ["session_id", "turn_index", "a", "b"]
    assert list(zip(frame.session_id, frame.turn_index)) == [("s1", 0), ("s1", 1)]
    assert frame["a"].tolist() == pytest.approx([0.3, 0.5])
    assert frame["b"].tolist() == pytest.approx([0.8, 0.9])
    assert unmeasured == Unmeasured(in_a=2, in_b=2, either=3, total=5)


def test_min_detectable_drop_by_hand():
    # the baseline's (a) per-session means: 0.0, 0.0 (two turns), 0.5, 0.2
    f = frame_of([("s1", 0, 0.0, 0.1), ("s2", 0, 0.0, 0.2), ("s2", 1, 0.0, 0.4),
                  ("s3", 0, 0.5, 0.4), ("s4", 0, 0.2, 0.3)])
    sd = float(np.std([0.0, 0.0, 0.5, 0.2], ddof=1))
    z = NormalDist().inv_cdf
    expected = (z(0.975) + z(0.8)) * sd / math.sqrt(4)
    assert min_detectable_drop(f) == pytest.approx(expected)
    assert math.isnan(min_detectable_drop(f.iloc[:1]))
    same = f.assign(b=f["a"])  # two identical runs: the spread between sessions still says what can be seen
    assert min_detectable_drop(same) == pytest.approx(expected)
    flat = f.assign(a=0.7)  # no spread between sessions: not estimable, never 0
    assert math.isnan(min_detectable_drop(flat))


def test_between_repeat_spread():
    nan = float("nan")
    pt = per_turn_of([("x", 0, "s1", 0, 0.2), ("x", 1, "s1", 0, 0.4),
                      ("x", 0, "s1", 1, 0.5), ("x", 1, "s1", 1, 0.5),
                      ("x", 0, "s2", 0, 0.9), ("x", 1, "s2", 0, nan)])
    assert between_repeat_spread(pt, "ndcg@10", "x") == pytest.approx(np.std([0.2, 0.4], ddof=1) / 2)
    one = per_turn_of([("y", 0, "s1", 0, 0.2), ("y", 0, "s1", 1, 0.7)])
    assert between_repeat_spread(one, "ndcg@10", "y") == 0.0
    assert math.isnan(between_repeat_spread(one, "ndcg@10", "missing"))


def test_same_seed_same_result_other_seed_differs():
    f = improvement_frame(noise=0.3)
    assert session_bootstrap_ci(f, seed=5) == session_bootstrap_ci(f, seed=5)
    assert session_bootstrap_ci(f, seed=5) != session_bootstrap_ci(f, seed=6)
    assert session_randomization_test(f, seed=5) == session_randomization_test(f, seed=5)


def test_compare_arms_rows_holm_and_segment():
    f = improvement_frame(n_sessions=30, n_turns=2)
    rows = []
    for r in f.itertuples():
        rows += [("original", 0, r.session_id, r.turn_index, r.a),
                 ("better", 0, r.session_id, r.turn_index, r.b),
                 ("same", 0, r.session_id, r.turn_index, r.a)]
    rows.append(("better", 0, "s000", 9, 0.5))  # unmeasured in the reference
    pt = per_turn_of(rows)
    out = compare_arms(pt, "ndcg@10", "original", ["better", "same"], n_resamples=2000,
                       n_permutations=2000)
    assert list(out.columns) == ["metric", "direction", "reference", "arm", "n_turns", "n_sessions",
                                 "n_unmeasured", "mean_ref", "mean_arm", "diff", "ci_lo", "ci_hi",
                                 "p", "p_holm", "holm_m", "p_exact", "p_floor", "wins", "ties", "losses", "mde"]
    better, same = out.iloc[0], out.iloc[1]
    assert (better.arm, better.n_turns, better.n_sessions, better.n_unmeasured) == ("better", 60, 30, 1)
    assert better["diff"] == pytest.approx(better.mean_arm - better.mean_ref)
    assert better.ci_lo > 0 and better.p < 0.001 and better.wins == 60
    assert same.p == 1.0 and same.ties == 60 and same.ci_lo == same.ci_hi == 0.0
    assert out["p_holm"].tolist() == pytest.approx(holm(out["p"].tolist())) and set(out["holm_m"]) == {2}
    # order of candidates does not change a row
    swapped = compare_arms(pt, "ndcg@10", "original", ["same", "better"], n_resamples=2000,
                           n_permutations=2000)
    assert swapped.iloc[1]["ci_lo"] == better.ci_lo and swapped.iloc[1]["p"] == better.p

    keys = {(f"s{s:03d}", t) for s in range(10) for t in range(2)}
    seg = compare_arms(pt, "ndcg@10", "original", ["better"], segment_keys=keys,
                       n_resamples=500, n_permutations=500)
    assert (seg.iloc[0].n_turns, seg.iloc[0].n_sessions, seg.iloc[0].n_unmeasured) == (20, 10, 0)


def test_spread_table_is_each_arms_mean_and_bootstrap_ci_per_turn_bucket():
    from harness.metrics.spread import spread_table

    rows = []
    for s in range(12):
        for t in (1, 2, 3, 4, 5):
            for rep in (0, 1):  # repeats are averaged first
                rows.append({"arm_id": "a", "repeat": rep, "session_id": f"s{s}", "turn_index": t, "metric": "recall@10",
                             "value": float((s + t + rep) % 3 == 0)})
    rows.append({"arm_id": "a", "repeat": 0, "session_id": "s0", "turn_index": 6, "metric": "recall@10", "value": None})
    per_turn = pd.DataFrame(rows)
    sp = spread_table(per_turn).set_index("bucket")
    assert list(sp.index) == ["1", "2", "3", "4+", "all"]
    turn_means = per_turn.dropna().groupby(["session_id", "turn_index"])["value"].mean()
    assert sp.loc["all", "mean"] == pytest.approx(turn_means.mean()) and sp.loc["all", "n"] == 60  # unmeasured left out
    four = turn_means[turn_means.index.get_level_values(1) >= 4]
    assert sp.loc["4+", "mean"] == pytest.approx(four.mean()) and sp.loc["4+", "n_sessions"] == 12
    assert (sp["lo"] <= sp["mean"]).all() and (sp["mean"] <= sp["hi"]).all() and (sp["hi"] > sp["lo"]).any()


def test_paired_aligned_equals_the_outer_join():
    """Two arms with rows for the same turns are paired from their arrays (no join): the same frame,
    column for column and dtype for dtype, and the same counts of unmeasured turns as the join."""
    from harness.metrics.stats import TurnMeans, _paired_aligned, paired_means, _paired_outer

    rng = np.random.default_rng(3)
    for trial in range(40):
        sessions = [f"s{i:02d}" for i in rng.permutation(int(rng.integers(1, 12)))]
        turns = [(s, t) for s in sessions for t in range(1, int(rng.integers(1, 5)) + 1)]
        rows = []
        for arm in ("ref", "cand"):
            for s, t in turns:
                v = rng.random() if rng.random() > 0.2 else np.nan  # unmeasured turns on either side
                rows.append({"arm_id": arm, "repeat": 0, "session_id": s, "turn_index": t, "metric": "m", "value": v})
        per_turn = pd.DataFrame(rows).astype({"session_id": "string[pyarrow]"}) if trial % 2 else pd.DataFrame(rows)
        means = TurnMeans(per_turn)
        ma, mb = means.of("m", "ref"), means.of("m", "cand")
        fast, fast_counts = _paired_aligned(ma, mb)
        slow, slow_counts = _paired_outer(ma, mb)
        pd.testing.assert_frame_equal(fast, slow, check_exact=True)
        assert fast_counts == slow_counts
        assert paired_means(ma, mb)[0].equals(slow)
