"""Tests of harness/run: the replay engine, its workers and progress."""
