"""The statistics' one configuration: counts, levels and seed of every CI and p."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StatsDefaults:
    """The one home of the statistics' counts and levels: every comparison (harness compare, the gate,
    gate.md and gate.json, the report's verdict block, answer and comparisons table) and every spread
    uses these, so one comparison prints the same CI and p wherever it is shown.

    n_resamples: session-bootstrap resamples of a CI; n_permutations: sign patterns drawn by the
    Monte Carlo randomization test (its p is at least 1 / (1 + n_permutations), so Holm over ~1000
    comparisons can still reach alpha); exact_max_sessions: up to this many sessions every one of
    the 2^S patterns is enumerated instead; alpha: a CI's level (1 - alpha) and the tests' level;
    power: of the smallest detectable difference; seed: of every draw; normal_from_sessions: from this
    many sessions on, the CI and the p take their large-sample normal forms (the bootstrap's and the
    sign-flip distribution's limits, in time linear in the sessions: drawing 10,000 resamples of a
    month's 250,000 sessions took minutes per comparison; docs/statistics.md)."""
    n_resamples: int = 10_000
    spread_resamples: int = 1_000  # of one arm's own CI (plot bands, the headline's spread), never a comparison
    n_permutations: int = 20_000
    exact_max_sessions: int = 20
    alpha: float = 0.05
    power: float = 0.8
    seed: int = 0
    normal_from_sessions: int = 20_000

    @property
    def ci_label(self) -> str:
        """A CI's column head: `95% CI` at alpha 0.05."""
        return f"{1 - self.alpha:.0%} CI"

    def said(self) -> str:
        """How a CI and a p are computed, in the words every output states them."""
        return (f"{1 - self.alpha:.0%} CI: session bootstrap ({self.n_resamples:,} resamples, seed {self.seed}); "
                f"p: two-sided session sign-flip test (every sign pattern up to {self.exact_max_sessions} sessions, "
                f"else {self.n_permutations:,} drawn; `<x (resolution)` where no draw was as extreme); from "
                f"{self.normal_from_sessions:,} sessions on, both in their large-sample normal forms")

    def method(self) -> dict:
        """The counts as the outputs state them."""
        return {"n_resamples": self.n_resamples, "n_permutations": self.n_permutations,
                "exact_max_sessions": self.exact_max_sessions, "alpha": self.alpha, "seed": self.seed,
                "normal_from_sessions": self.normal_from_sessions}


STATS = StatsDefaults()
