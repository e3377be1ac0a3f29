"""Budget suite: see README.md for the pass criteria. Generated from conformance.checks.check_table, the table
`conformance run` judges by, so the suite and the job cannot disagree."""

from conformance.pytest_plugin.suite import golden_test, table_test

test_budget_golden = golden_test("budget")
test_budget_checks = table_test("budget")
