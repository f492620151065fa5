"""The test suite, a package: its modules import each other as tests.GROUP.test_x (and tests.conftest,
tests.evidence). Each group mirrors a package of harness/ (store, run, steps, metrics, analysis,
report, cli, arms, roles, corpus, llm, evalset, importers); house holds the checks on the whole
project, e2e the scripts, make targets, bench and reliability suites that drive it as a user does."""
