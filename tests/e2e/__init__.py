"""The harness driven as a user drives it: scripts/, make targets, bench/ and the reliability
suites of issue 9 (docs/reliability.md)."""
