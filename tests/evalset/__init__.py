"""Tests of harness/evalset and of the shipped eval sets."""
