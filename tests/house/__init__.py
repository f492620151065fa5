"""Checks on the whole project: layers, one home per definition and constant, no private APIs,
no leaks of labels into rules, readable output, docs that quote the code."""
