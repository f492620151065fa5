"""Tests of harness/store: the run folder's record, traces and shards."""
