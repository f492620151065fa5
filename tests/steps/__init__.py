"""Tests of harness/steps: the judge and relevance labels over a finished run."""
