"""Memory suite: see README.md for the pass criteria. Generated from conformance.checks.check_table, the table
`conformance run` judges by, so the suite and the job cannot disagree."""

from conformance.pytest_plugin.suite import golden_test, table_test

test_memory_golden = golden_test("memory")
test_memory_checks = table_test("memory")
