"""The pytest face of expectations files (`pytest suites/ --expectations FILE`), registered by
`conformance.pytest_plugin.plugin`; the files and their reading are `conformance.checks.expectations`.

Contract: a suite test an entry marks as a known failure is marked `xfail(strict=True,
raises=pytest.fail.Exception)` at collection: its failure is reported as xfailed (with the entry's
reason and link), its pass as XPASS(strict), which fails the session (the known failure is fixed:
remove the entry); a failure no entry names fails as usual, and so does anything but a check's own
failure (an engine that crashes is never hidden). The terminal summary's "expectations" section lists
expected failures, unexpected passes and new failures apart. A bad file is a usage error naming the
file and the JSON path.
"""

from __future__ import annotations

import pytest

EXPECTATIONS = pytest.StashKey[tuple]()
EXPECTED_FAILURE_PROPERTY = "expected_failure"


def load_option(config: pytest.Config) -> tuple:
    files = config.getoption("--expectations", default=None) or []
    if not files:
        return ()
    from conformance.checks.expectations import ExpectationsError, load_expectations

    try:
        return load_expectations(files)
    except ExpectationsError as exc:
        raise pytest.UsageError(f"--expectations: {exc}") from None


def check_name(item: pytest.Item) -> str | None:
    """The check a suite test judges: its `check` parameter's name, or `<suite>.golden`; None for any
    other test."""
    from conformance.pytest_plugin.suite import KIND_ATTR, SUITE_ATTR

    params = getattr(getattr(item, "callspec", None), "params", {})
    fn = getattr(item, "function", None)
    if params.get("engine") is None or params.get("case") is None:
        return None
    if params.get("check") is not None:
        return params["check"].name
    if getattr(fn, KIND_ATTR, None) == "golden":
        return f"{getattr(fn, SUITE_ATTR)}.golden"
    return None


def mark_expected(entries, items: list[pytest.Item]) -> None:
    from conformance.checks.expectations import find

    for item in items:
        check = check_name(item)
        if check is None:
            continue
        entry = find(entries, check, item.callspec.params["engine"], item.callspec.params["case"].id)
        if entry is None:
            continue
        item.add_marker(pytest.mark.xfail(strict=True, raises=pytest.fail.Exception,
                                          reason=f"expected failure: {entry.describe()}"))
        item.user_properties.append((EXPECTED_FAILURE_PROPERTY, entry.describe()))


def summary_lines(stats) -> dict[str, list[str]]:
    """The session's reports read against the expectations: expected failures (xfailed), unexpected
    passes (XPASS(strict) of an expected failure), new failures (any other failure)."""
    out: dict[str, list[str]] = {"expected failures": [], "unexpected passes (fail the run)": [],
                                 "new failures (fail the run)": []}
    for reports in stats.values():
        for r in reports:
            if not isinstance(r, pytest.TestReport) or (r.when != "call" and not (r.when == "setup" and r.failed)):
                continue
            entry = dict(r.user_properties).get(EXPECTED_FAILURE_PROPERTY)
            if hasattr(r, "wasxfail") and r.skipped:
                out["expected failures"].append(f"{r.nodeid}: {entry or r.wasxfail}")
            elif entry is not None and r.failed and str(r.longrepr).startswith("[XPASS(strict)]"):
                out["unexpected passes (fail the run)"].append(f"{r.nodeid}: passed, but {entry}: remove the entry")
            elif r.failed:
                out["new failures (fail the run)"].append(r.nodeid)
    return out


class ExpectationsPlugin:
    """Registered per config by `conformance.pytest_plugin.plugin`; idle without `--expectations`."""

    def __init__(self, config: pytest.Config):
        config.stash[EXPECTATIONS] = load_option(config)

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        entries = config.stash.get(EXPECTATIONS, ())
        if entries:
            mark_expected(entries, items)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if not config.stash.get(EXPECTATIONS, ()):
            return
        terminalreporter.section("expectations")
        for title, lines in summary_lines(terminalreporter.stats).items():
            terminalreporter.write_line(f"{title}: {len(lines)}")
            for line in lines:
                terminalreporter.write_line(f"  {line}")
