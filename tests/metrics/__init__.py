"""Tests of harness/metrics: the kernels against references, statistics, scoring at scale."""
