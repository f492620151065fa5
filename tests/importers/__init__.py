"""Tests of harness/importers: eval sets and runs from MTRAG, TREC and logs."""
