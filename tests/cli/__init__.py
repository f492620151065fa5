"""Tests of harness/cli and the run config (harness/config.py): commands, their errors and tables."""
