"""What a sign-flip p can be: exact or Monte Carlo, its smallest attainable value, and the p as
every command prints it (a bound at the resolution limit, never a bare floor). No resampling here:
the report may import it to format a p the scoring step recorded."""
from __future__ import annotations

import math

from harness.defaults import STATS


def is_exact(n_sessions: int) -> bool:
    """Whether the sign-flip test over `n_sessions` enumerates every pattern (else Monte Carlo)."""
    return 0 < n_sessions <= STATS.exact_max_sessions


def p_floor(n_sessions: int, n_permutations: int = STATS.n_permutations) -> float:
    """The smallest p the sign-flip test can give: 2 / 2^S when exact (the observed pattern and its
    mirror), 1 / (1 + n_permutations) by Monte Carlo; NaN without a session."""
    if n_sessions <= 0:
        return math.nan
    return 2.0 / 2 ** n_sessions if is_exact(n_sessions) else 1.0 / (1 + n_permutations)


def at_floor(p: float, n_sessions: int, n_permutations: int = STATS.n_permutations) -> bool:
    """Whether `p` is the smallest value the test can give (its resolution limit, not evidence)."""
    return p == p and p <= p_floor(n_sessions, n_permutations) * (1 + 1e-9)


def describe_p(p: float, n_sessions: int, n_permutations: int = STATS.n_permutations, short: bool = False,
               adjusted: float | None = None) -> str:
    """A p as printed everywhere (the Holm-adjusted one when `adjusted` is given): at the test's
    resolution limit it is a bound that says so ('≤ 0.00005 (20,000 permutations)'; `short`: '≤0.00005',
    the table's title says why); an exact test's smallest p says it is exact."""
    value = p if adjusted is None else adjusted
    if value is None or value != value:
        return "—"
    if not at_floor(p, n_sessions, n_permutations):
        return f"{value:.4f}"
    if is_exact(n_sessions):
        return f"{value:.4g}" + ("" if short else f" (exact: the smallest possible with {n_sessions} sessions)")
    return f"≤{value:.5f}" if short else f"≤ {value:.5f} ({n_permutations:,} permutations: the test's limit)"
