"""Tests of harness/report: the HTML report (chromium.py: its headless-browser checks)."""
