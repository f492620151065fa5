"""Defaults more than one layer reads, defined once: the ranking metrics' settings of a run (a run
config's `metrics:`, and what a manifest without them means) and the names of the metrics the judge
role gives. Light on purpose (pydantic only): gate and compare import it."""
from __future__ import annotations

from pydantic import Field

from harness.strict import Strict

FAITHFULNESS = "faithfulness"  # the judge role's metrics (harness/roles/judge.py, metrics/families/judged.py)
RESPONSE_RELEVANCY = "response_relevancy"
JUDGED_METRICS = (FAITHFULNESS, RESPONSE_RELEVANCY)  # what `harness judge` computes by default, in this order


class MetricsConfig(Strict):
    """The ranking metrics' settings: recall at `cutoffs`, nDCG and MRR at theirs and judged@k at
    `judged_at` are computed for every run; `measures` names further ranking measures to compute
    (`map`, `bpref`, `precision@10`, any spelling harness.metrics.registry resolves)."""

    cutoffs: list[int] = Field(default_factory=lambda: [5, 10, 20])
    ndcg_at: int = 10
    mrr_at: int = 10
    judged_at: int = Field(default=10, ge=1)
    measures: list[str] = Field(default_factory=list)


def metric_settings(recorded: dict | None) -> dict:
    """A run's metric settings as its manifest records them; a setting the manifest lacks (it was
    written before the setting existed, or there are none) is the default."""
    return {**MetricsConfig().model_dump(), **(recorded or {})}
