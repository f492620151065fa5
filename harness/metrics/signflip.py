"""The session sign-flip (randomization) test and how its p is written: the kernels behind
harness.metrics.stats (which owns the counts, STATS). With few sessions every one of the 2^S sign
patterns is enumerated (exact); above `exact_max` sessions `n_permutations` patterns are drawn (Monte
Carlo), whose p cannot go below its resolution 1/(1 + n_permutations). docs/statistics.md."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Upper bound on the number of elements of one block of drawn sign patterns (rows x sessions), so
# that many permutations x many sessions never materialise one huge matrix.
BLOCK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class SignFlip:
    """A two-sided p of the sign-flip test, how it was computed (`exact`: all 2^S patterns) and the
    smallest p that computation can give (`resolution`: 2 / 2^S exact, 1 / (1 + draws) Monte Carlo)."""
    p: float
    exact: bool
    resolution: float

    @property
    def at_resolution(self) -> bool:
        """A Monte Carlo p at its floor: no drawn pattern was as extreme as the observed one, so the
        true p is anywhere below the floor; the number says how many patterns were drawn, not how strong
        the evidence is."""
        return not self.exact and not math.isnan(self.p) and self.p <= self.resolution * (1 + 1e-9)


def blocks(n_rows: int, n_cols: int):
    """Row counts of blocks of at most BLOCK_ELEMENTS elements covering `n_rows` rows of `n_cols`."""
    size = max(1, BLOCK_ELEMENTS // max(n_cols, 1))
    done = 0
    while done < n_rows:
        step = min(size, n_rows - done)
        yield step
        done += step


def _half_sums(values: np.ndarray) -> np.ndarray:
    """The 2^k signed sums of `values` (k of them), one per sign pattern."""
    out = np.zeros(1)
    for v in values:
        out = np.concatenate([out + v, out - v])
    return out


def exact_hits(sums: np.ndarray, threshold: float) -> int:
    """How many of the 2^S sign patterns of `sums` give |sum| >= threshold (> 0): every pattern is
    the sum of a pattern of each half of the sessions, so each half's 2^(S/2) sums are listed and,
    the second sorted, the matching partners of every first-half sum are counted by binary search
    (the same count as enumerating all 2^S, in 2^(S/2) steps)."""
    k = len(sums) // 2
    left, right = _half_sums(sums[:k]), np.sort(_half_sums(sums[k:]))
    up = len(right) - np.searchsorted(right, threshold - left, side="left")  # left + right >= t
    down = np.searchsorted(right, -threshold - left, side="right")  # left + right <= -t
    return int(up.sum() + down.sum())


def sign_flip(sums: np.ndarray, n_permutations: int, seed: int, exact_max: int,
              normal_from: int | None = None) -> SignFlip:
    """Two-sided sign-flip test of the per-session sums of differences (statistic |sum_s e_s D_s|).
    Exact with at most `exact_max` sessions: p = #{|T_e| >= |T_obs|} / 2^S over every pattern e (the
    observed one included). Monte Carlo above: p = (1 + hits) / (1 + n_permutations) over patterns
    drawn with numpy.random.default_rng(seed). A relative tolerance of 1e-12 absorbs floating-point
    noise; identical arms give p = 1. NaN without a session. From `normal_from` sessions on, the
    normal limit of the sign-flip distribution (`normal_p`), which has no resolution."""
    n = len(sums)
    if n == 0:
        return SignFlip(math.nan, n <= exact_max, math.nan)
    observed = abs(float(sums.sum()))
    tol = 1e-12 * max(1.0, float(np.abs(sums).sum()))
    if n <= exact_max:
        resolution = 2.0 / 2.0 ** n
        if observed - tol <= 0:
            return SignFlip(1.0, True, resolution)
        return SignFlip(min(1.0, exact_hits(sums, observed - tol) / 2.0 ** n), True, resolution)
    if normal_from is not None and n >= normal_from:
        return SignFlip(1.0 if observed - tol <= 0 else normal_p(sums), False, math.nan)
    rng = np.random.default_rng(seed)
    hits = 0
    for step in blocks(n_permutations, n):
        signs = rng.integers(0, 2, size=(step, n), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ sums) >= observed - tol))
    return SignFlip((1 + hits) / (1 + n_permutations), False, 1.0 / (1 + n_permutations))


def normal_p(sums: np.ndarray) -> float:
    """The two-sided p of |sum_s e_s D_s| under its normal limit: over sign patterns the sum has mean
    0 and variance sum(D_s^2), so p = erfc(|sum D_s| / sqrt(2 sum D_s^2))."""
    var = float(np.square(sums).sum())
    return 1.0 if var <= 0 else min(1.0, math.erfc(abs(float(sums.sum())) / math.sqrt(2.0 * var)))


def p_said(p: float | None, floor: float | None = None, adjusted: bool = False, digits: int = 4) -> str:
    """A p as every output writes it: `0.0123`. `floor`: the resolution of a Monte Carlo p that sits
    at it (SignFlip.at_resolution), else None: the p is then written `<0.0001 (resolution)`, since
    only the number of draws bounds it, and its Holm p (`adjusted`) `≤0.0024 (resolution)`. An em dash
    when missing."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    if floor is None or (isinstance(floor, float) and math.isnan(floor)):
        return f"{p:.{digits}f}"
    if adjusted:
        return f"≤{_ceil(p, digits)} (resolution)"
    return f"<{_ceil(floor, digits)} (resolution)"


def _ceil(v: float, digits: int) -> str:
    """`v` rounded up at `digits` decimals (a bound stays a bound when written)."""
    return f"{math.ceil(v * 10 ** digits - 1e-9) / 10 ** digits:.{digits}f}"
