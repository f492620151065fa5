"""Tests of harness/analysis: compare, the gate and its policy, verdicts, the evidence under them."""
