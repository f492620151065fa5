"""Defaults more than one layer reads, defined once: the ranking metrics' settings of a run (a run
config's `metrics:`, and what a manifest without them means) and the name of the metric the judge
role gives. Light on purpose (pydantic only): gate and compare import it."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

JUDGED_METRIC = "faithfulness"  # what the judge role gives (harness/roles/judge.py, metrics/families/judged.py)


class MetricsConfig(BaseModel):
    """The ranking metrics' settings."""

    model_config = ConfigDict(extra="forbid")
    cutoffs: list[int] = Field(default_factory=lambda: [5, 10, 20])
    ndcg_at: int = 10
    mrr_at: int = 10


def metric_settings(recorded: dict | None) -> dict:
    """A run's metric settings as its manifest records them; the defaults for a manifest without."""
    return dict(recorded) if recorded else MetricsConfig().model_dump()
