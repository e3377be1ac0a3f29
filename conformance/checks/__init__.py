"""The checks, one module per suite, each holding its check functions and its rows of the check table.

    row       the row type (`CheckSpec`) and the one input every check takes (`CheckInput`)
    common    what the checks share: building a verdict, null figures, documented differences
    golden    `<suite>.golden`: an observation against its own golden (the budget, memory and trace rows)
    budget    budget.*        memory    memory.*        trace     trace.*
    live      live.*  (the rows of `conformance.checks.live_checks`, judged on run observations)

Contract: a check is `run(CheckInput) -> Verdict`, a pure function of documents: it reads no file,
imports no pytest and knows no engine by name. Each suite module exports `ROWS` (its rows, in the
order the suite lists them); `conformance.checks.check_table` assembles them into `CHECKS` and
`LIVE_CHECKS` and supplies each check its oracle's document. The tables in README.md and
suites/*/README.md are generated from the rows (`conformance docs`), so adding a row without its
prose (`fails_when`) fails `tests/cli/test_docs.py`.
"""
