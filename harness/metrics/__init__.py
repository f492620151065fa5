"""Metrics: a registry of every metric (registry.py), one file per family of them (families/),
the scoring step that computes them from a run folder (score.py) and the tables it writes.
Importing the package registers every family, so a metric name resolves from anywhere."""
from harness.metrics import families  # noqa: F401  (registers every family with the registry)
