"""Trace suite: see README.md for the pass criteria. Generated from conformance.checks.check_table, the table
`conformance run` judges by, so the suite and the job cannot disagree."""

from conformance.pytest_plugin.suite import golden_test, table_test

test_trace_golden = golden_test("trace")
test_trace_checks = table_test("trace")
