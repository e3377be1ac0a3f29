"""Live suite: see README.md for the pass criteria. Generated from conformance.checks.check_table.LIVE_CHECKS,
the rows `conformance run --live` judges by, so the suite and the job cannot disagree."""

from conformance.pytest_plugin.suite import live_golden_test, live_peer_test, live_table_test

test_live_golden = live_golden_test()
test_live_checks = live_table_test()
test_transformers_peer = live_peer_test()
