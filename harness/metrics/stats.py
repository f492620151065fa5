"""Paired statistics for comparing a candidate arm against a reference arm, per metric.

Pure functions: no file I/O, no printing. Input is the per-turn table with columns
``arm_id, repeat, session_id, turn_index, metric, value`` (``value`` NaN = unmeasured).

Pairing is by ``(session_id, turn_index)``. Repeats are averaged per turn first. Turns of
one session are not independent, so every resampling procedure here treats the SESSION as
the unit: the bootstrap draws whole sessions and the randomization test flips the sign of
whole sessions. The statistic itself is always the mean difference over turns
(``b - a``, candidate minus reference). See docs/statistics.md for formulas and caveats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable

import numpy as np
import pandas as pd

from harness.metrics.signflip import SignFlip, blocks, p_said, sign_flip
from harness.metrics.stats_config import STATS, StatsDefaults  # noqa: F401 (read from here too)
from harness.store.folder import TURN_COLUMNS

PER_TURN_COLUMNS = [c for c in TURN_COLUMNS if c != "unmeasured"]  # what the statistics read of the metrics file
KEY = ["session_id", "turn_index"]


@dataclass(frozen=True)
class Unmeasured:
    """How many turns (of the union of turns seen in either arm for this metric) were left
    out of the pairing because they were unmeasured.

    ``in_a`` / ``in_b``: turns unmeasured (all repeats NaN, or no row at all) in that arm;
    ``either``: turns dropped from the pairing (unmeasured in a OR b);
    ``total``: all turns seen in either arm (``total - either`` = paired turns).
    """
    in_a: int
    in_b: int
    either: int
    total: int


def check_columns(per_turn: pd.DataFrame) -> None:
    missing = [c for c in PER_TURN_COLUMNS if c not in per_turn.columns]
    if missing:
        raise ValueError(f"per-turn table lacks columns {missing}")


def _turn_means(per_turn: pd.DataFrame, metric: str, arm: str) -> pd.Series:
    """Mean over repeats per turn (NaN-skipping); NaN when no repeat is measured.
    Indexed by (session_id, turn_index)."""
    rows = per_turn[(per_turn["metric"] == metric) & (per_turn["arm_id"] == arm)]
    if rows.empty:
        return pd.Series(dtype=float, index=pd.MultiIndex.from_arrays([[], []], names=KEY))
    values = pd.to_numeric(rows["value"], errors="coerce").astype(float)
    return values.groupby([rows["session_id"], rows["turn_index"]], sort=True).mean()


def paired_frame(per_turn: pd.DataFrame, metric: str, arm_a: str, arm_b: str
                 ) -> tuple[pd.DataFrame, Unmeasured]:
    """Pair two arms turn by turn for one metric.

    Each arm's value per turn is the mean over its repeats (NaN repeats are skipped; a turn
    whose repeats are all NaN, or that has no row for the arm, is unmeasured in that arm).
    Only turns measured in BOTH arms are kept; the others are counted in the returned
    :class:`Unmeasured`, never dropped silently.

    Returns ``(frame, unmeasured)`` where ``frame`` has columns
    ``session_id, turn_index, a, b`` sorted by session and turn.
    """
    check_columns(per_turn)
    return paired_means(_turn_means(per_turn, metric, arm_a), _turn_means(per_turn, metric, arm_b))


def paired_means(ma: pd.Series, mb: pd.Series) -> tuple[pd.DataFrame, Unmeasured]:
    """paired_frame of two arms' turn means (`_turn_means`)."""
    if ma.index.equals(mb.index) and ma.index.is_unique and ma.index.is_monotonic_increasing:
        return _paired_aligned(ma, mb)  # the usual case: both arms have a row for the same turns
    return _paired_outer(ma, mb)


def _paired_outer(ma: pd.Series, mb: pd.Series) -> tuple[pd.DataFrame, Unmeasured]:
    """_paired of any two arms' turn means: their outer join on the turn."""
    both = pd.concat([ma.rename("a"), mb.rename("b")], axis=1, join="outer")
    both.index.names = KEY
    missing_a = both["a"].isna()
    missing_b = both["b"].isna()
    either = missing_a | missing_b
    counts = Unmeasured(in_a=int(missing_a.sum()), in_b=int(missing_b.sum()),
                        either=int(either.sum()), total=int(len(both)))
    frame = both[~either].sort_index().reset_index()[["session_id", "turn_index", "a", "b"]]
    frame["a"] = frame["a"].astype(float)
    frame["b"] = frame["b"].astype(float)
    return frame, counts


def _paired_aligned(ma: pd.Series, mb: pd.Series) -> tuple[pd.DataFrame, Unmeasured]:
    """_paired of two arms' means on one sorted index of turns: the outer join, its sort and
    reset_index are the index itself, so the frame is built from the arrays (same rows, same
    columns and dtypes)."""
    a, b = ma.to_numpy(float), mb.to_numpy(float)
    missing_a, missing_b = np.isnan(a), np.isnan(b)
    either = missing_a | missing_b
    counts = Unmeasured(in_a=int(missing_a.sum()), in_b=int(missing_b.sum()), either=int(either.sum()),
                        total=len(a))
    keep = ~either
    index = ma.index[keep] if either.any() else ma.index
    frame = pd.DataFrame({"session_id": index.get_level_values(0), "turn_index": index.get_level_values(1),
                          "a": a[keep], "b": b[keep]})
    return frame, counts


class TurnMeans:
    """The turn means (`_turn_means`) of a per-turn table, each (metric, arm)'s computed once and
    restricted to a segment's turns on request. A turn's mean depends on that turn's rows alone, so
    restricting the means equals grouping the restricted rows; compare_arms on several candidates of
    one reference, or on several segments of one table, groups each arm's rows once instead of once
    per candidate and segment. A subclass may hand over each (metric, arm)'s rows (`rows_of`)."""

    def __init__(self, per_turn: pd.DataFrame):
        check_columns(per_turn)
        self.per_turn = per_turn
        self._means: dict[tuple[str, str], pd.Series] = {}

    def rows_of(self, metric: str, arm: str) -> pd.DataFrame:
        """A table holding (at least) the rows of `metric` and `arm`, in the per-turn table's order."""
        return self.per_turn

    def of(self, metric: str, arm: str, segment_keys=None) -> pd.Series:
        """The arm's turn means of `metric`; only the turns of `segment_keys` when given."""
        if (metric, arm) not in self._means:
            self._means[(metric, arm)] = _turn_means(self.rows_of(metric, arm), metric, arm)
        means = self._means[(metric, arm)]
        if segment_keys is None:
            return means
        keys = segment_keys if isinstance(segment_keys, (set, frozenset)) else set(segment_keys)
        # a set lookup per turn: MultiIndex.isin built an index of the keys on every call
        return means[np.fromiter((k in keys for k in means.index), bool, len(means))] if keys else means.iloc[0:0]


def paired_of(means: "TurnMeans", metric: str, arm_a: str, arm_b: str, segment_keys=None) -> pd.DataFrame:
    """paired_frame of two arms' turn means in `means` (restricted to `segment_keys` when given)."""
    return paired_means(means.of(metric, arm_a, segment_keys), means.of(metric, arm_b, segment_keys))[0]


def _session_sums(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-session sum of turn differences (b - a) and per-session turn counts."""
    if frame.empty:
        return np.zeros(0), np.zeros(0)
    return session_sums(frame["session_id"].to_numpy(), frame["b"].to_numpy(float) - frame["a"].to_numpy(float))


def session_sums(session_ids: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-session sums of `d` (added in row order) and turn counts, sessions in sorted order."""
    if not len(d):
        return np.zeros(0), np.zeros(0)
    inverse = pd.factorize(session_ids, sort=True)[0]  # np.unique's codes (sessions in sorted order), by hashing
    return np.bincount(inverse, weights=d), np.bincount(inverse).astype(float)


def session_bootstrap_ci(frame: pd.DataFrame, n_resamples: int = STATS.n_resamples, alpha: float = STATS.alpha,
                         seed: int = STATS.seed) -> tuple[float, float, float]:
    """Mean difference over turns (b - a) with a paired, session-level percentile bootstrap CI.

    Each resample draws ``S`` sessions with replacement out of the ``S`` sessions in
    ``frame``; every turn of a drawn session comes along. The resampled statistic is
    ``sum(drawn session sums of d) / sum(drawn session turn counts)``, i.e. the mean over
    the turns of the resample. The interval is the ``alpha/2`` and ``1 - alpha/2``
    quantiles of the resampled means. Seeded (``numpy.random.default_rng(seed)``) and
    vectorised. Returns ``(mean_diff, lo, hi)``; all NaN for an empty frame.
    """
    return bootstrap_of_sums(*_session_sums(frame), n_resamples, alpha, seed)


def bootstrap_of_sums(sums: np.ndarray, counts: np.ndarray, n_resamples: int = STATS.n_resamples,
                      alpha: float = STATS.alpha, seed: int = STATS.seed) -> tuple[float, float, float]:
    """session_bootstrap_ci of the per-session sums and turn counts (`session_sums`); from
    STATS.normal_from_sessions sessions on, its large-sample limit (`normal_ratio_ci`)."""
    n_sessions = len(sums)
    if n_sessions == 0:
        return (math.nan, math.nan, math.nan)
    mean_diff = float(sums.sum() / counts.sum())
    if n_sessions >= STATS.normal_from_sessions:
        return normal_ratio_ci(sums, counts, alpha)
    rng = np.random.default_rng(seed)
    boot = np.empty(n_resamples)
    start = 0
    for step in blocks(n_resamples, n_sessions):
        idx = rng.integers(0, n_sessions, size=(step, n_sessions))
        boot[start:start + step] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
        start += step
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return (mean_diff, float(lo), float(hi))


def normal_ratio_ci(sums: np.ndarray, counts: np.ndarray, alpha: float = STATS.alpha) -> tuple[float, float, float]:
    """The session bootstrap's large-sample limit: the mean over turns r = sum(D_s) / sum(n_s) with
    r +- z_(1-alpha/2) * SE, SE = sqrt(sum((D_s - r n_s)^2)) / sum(n_s), the delta method's standard
    error of a ratio of session sums, which is the spread of r over resamples of whole sessions as
    their number grows. In time linear in the sessions."""
    total = float(counts.sum())
    r = float(sums.sum() / total)
    se = math.sqrt(float(np.square(sums - r * counts).sum())) / total
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return (r, r - z * se, r + z * se)


def session_randomization_test(frame: pd.DataFrame, n_permutations: int = STATS.n_permutations,
                               seed: int = STATS.seed) -> float:
    """Two-sided paired randomization (sign-flip) test with sessions as the unit.

    Under the null hypothesis the two arms are exchangeable within each session, so the
    sign of a whole session's differences may be flipped (all its turns together).
    Statistic: mean difference over turns, ``T = sum_s e_s * D_s / N`` with ``D_s`` the
    session's sum of (b - a), ``N`` the number of turns and ``e_s`` in {-1, +1}. Exact (all 2^S
    patterns) up to STATS.exact_max_sessions sessions, else
    ``p = (1 + #{|T_perm| >= |T_obs|}) / (1 + n_permutations)`` (harness.metrics.signflip).
    Identical arms give ``p = 1.0``. NaN for an empty frame.
    """
    return randomization_of_sums(_session_sums(frame)[0], n_permutations, seed).p


def randomization_of_sums(sums: np.ndarray, n_permutations: int = STATS.n_permutations,
                          seed: int = STATS.seed) -> SignFlip:
    """session_randomization_test of the per-session sums of differences (`session_sums`), with how
    its p was computed and the smallest p that computation can give."""
    return sign_flip(sums, n_permutations, seed, STATS.exact_max_sessions, STATS.normal_from_sessions)


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in input order.

    With the ``m`` p-values sorted ascending ``p_(1) <= ... <= p_(m)``:
    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j))``. NaN entries stay NaN and do not
    count towards ``m``.
    """
    p = np.asarray(list(p_values), dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0:
        return out.tolist()
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out.tolist()


def wins_ties_losses(frame: pd.DataFrame, tol: float = 1e-12, direction: str = "higher") -> tuple[int, int, int]:
    """Per-turn counts of wins, ties (|b - a| <= tol) and losses for the candidate b. A win is
    b > a + tol for a `higher` metric and b < a - tol for a `lower` one; for a `none` metric
    (whose good direction the segment decides) the counts are higher / tie / lower."""
    d = frame["b"].to_numpy(float) - frame["a"].to_numpy(float)
    up, tie, down = int(np.sum(d > tol)), int(np.sum(np.abs(d) <= tol)), int(np.sum(d < -tol))
    return (down, tie, up) if direction == "lower" else (up, tie, down)


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


COMPARE_COLUMNS = ["metric", "direction", "reference", "arm", "n_turns", "n_sessions", "n_unmeasured",
                   "mean_ref", "mean_arm", "diff", "ci_lo", "ci_hi", "p", "p_holm", "holm_m", "p_exact",
                   "p_floor", "wins", "ties", "losses", "mde"]


def compare_arms(per_turn: pd.DataFrame | TurnMeans, metric: str, reference: str = "original",
                 candidates: Iterable[str] = (), segment_keys=None, n_resamples: int = STATS.n_resamples,
                 n_permutations: int = STATS.n_permutations, alpha: float = STATS.alpha,
                 power: float = STATS.power, seed: int = STATS.seed, tol: float = 1e-12,
                 direction: str | None = None) -> pd.DataFrame:
    """One row per candidate arm compared with ``reference`` on ``metric``.

    ``per_turn``: the per-turn table, or its :class:`TurnMeans` when the caller compares on several
    segments or metrics of one table (each arm's turn means are then computed once).
    ``segment_keys``: optional set of ``(session_id, turn_index)`` to restrict to (a segment).
    Columns: ``metric, reference, arm, n_turns`` (paired turns), ``n_sessions``,
    ``n_unmeasured`` (turns unmeasured in either arm, not paired), ``mean_ref, mean_arm``
    (over the paired turns), ``diff`` (mean_arm - mean_ref), ``ci_lo, ci_hi`` (session
    bootstrap), ``p`` (session sign-flip test), ``p_holm`` (Holm across the rows of this
    call; ``holm_m``: how many p-values that family holds), ``p_exact`` (every sign pattern
    enumerated), ``p_floor`` (the test's resolution when ``p`` sits at it, else NaN), ``wins, ties, losses`` (per turn, for the candidate, by the metric's direction),
    ``mde``. ``direction``: the metric's (higher, lower, none), from the registry unless given.
    Every candidate uses the same ``seed``, so a row does not depend on the order of
    ``candidates``.
    """
    means = per_turn if isinstance(per_turn, TurnMeans) else TurnMeans(per_turn)
    if direction is None:
        from harness.metrics.registry import direction_of

        direction = direction_of(metric)
    ref = means.of(metric, reference, segment_keys)  # once for every candidate
    rows = []
    for arm in candidates:
        frame, unmeasured = paired_means(ref, means.of(metric, arm, segment_keys))
        n_turns = len(frame)
        sums, counts = _session_sums(frame)  # once for the interval and the test
        if n_turns:
            diff, lo, hi = bootstrap_of_sums(sums, counts, n_resamples, alpha, seed)
            test = randomization_of_sums(sums, n_permutations, seed)
            p, exact, floor = test.p, test.exact, test.resolution if test.at_resolution else math.nan
            a, b = frame["a"].to_numpy(float), frame["b"].to_numpy(float)
            mean_ref, mean_arm = float(a.sum() / n_turns), float(b.sum() / n_turns)  # as Series.mean (no NaN here)
        else:
            diff = lo = hi = p = mean_ref = mean_arm = floor = math.nan
            exact = False
        wins, ties, losses = wins_ties_losses(frame, tol, direction)
        rows.append({"metric": metric, "direction": direction, "reference": reference, "arm": arm, "n_turns": n_turns,
                     "n_sessions": len(sums),
                     "n_unmeasured": unmeasured.either, "mean_ref": mean_ref,
                     "mean_arm": mean_arm, "diff": diff, "ci_lo": lo, "ci_hi": hi, "p": p,
                     "p_exact": exact, "p_floor": floor, "wins": wins, "ties": ties, "losses": losses,
                     "mde": min_detectable_drop(frame, alpha, power)})
    out = pd.DataFrame(rows, columns=[c for c in COMPARE_COLUMNS if c not in ("p_holm", "holm_m")])
    out.insert(COMPARE_COLUMNS.index("p_holm"), "p_holm", math.nan)
    out.insert(COMPARE_COLUMNS.index("holm_m"), "holm_m", 0)
    return holm_over(out)


def holm_over(table: pd.DataFrame, part=None) -> pd.DataFrame:
    """`table` with `p_holm` (Holm over the p of the rows of `part`, a boolean mask; every row when
    None) and `holm_m` (the size of that family, which every output states beside a Holm p) set on
    those rows; the table is changed in place and returned."""
    part = np.ones(len(table), bool) if part is None else np.asarray(part, bool)
    if "p_holm" not in table:
        table["p_holm"] = math.nan
    if "holm_m" not in table:
        table["holm_m"] = 0
    if part.any():
        p = table.loc[part, "p"].tolist()
        table.loc[part, "p_holm"] = holm(p)
        table.loc[part, "holm_m"] = int(np.count_nonzero(~np.isnan(np.asarray(p, float))))
    return table


def holm_said(m: int, what: str = "comparisons of this table") -> str:
    """Which family a Holm p is adjusted over, as every output names it."""
    return f"pHolm: Holm over the {m} {what}"


def p_cells(r) -> tuple[str, str]:
    """(p, pHolm) of a comparison row (a dict or a named tuple of compare_arms' columns) as written."""
    get = r.get if isinstance(r, dict) else lambda k, d=None: getattr(r, k, d)
    floor = get("p_floor")
    return p_said(get("p"), floor), p_said(get("p_holm"), floor, adjusted=True)


def sessions_needed(mde: float, n_sessions: int, margin: float) -> int | None:
    """About how many sessions would bring the smallest detectable difference `mde` (measured with
    `n_sessions`) down to `margin`: the MDE shrinks as 1 / sqrt(sessions). None when not estimable."""
    if not margin > 0 or math.isnan(mde) or not n_sessions:
        return None
    return int(math.ceil(n_sessions * (mde / margin) ** 2))
