"""JUnit XML of a `RunReport`, for CI systems.

One `<testsuite>` per engine. In it, one `<testcase>` per (case) named `observation[<case>]`
(an `error` observation is an `<error>`, a missing one is `<skipped>`), and one per verdict named
`<check>[<case>]` (`fail` -> `<failure>`, `skip` -> `<skipped>`), read as the run's gate reads it:
an expected failure (the run's expectations) and an oracle's finding are `<skipped>` with what they
are, an expected failure that passed is a `<failure type="unexpected-pass">`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.checks.expectations import find
from conformance.report.atomic import write_atomic
from conformance.report.model import RunReport, cell_outcome, is_finding

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(s: object) -> str:
    """XML text: characters XML cannot hold dropped, a lone surrogate written as its escape."""
    text = str(s if s is not None else "").encode("utf-8", "backslashreplace").decode("utf-8")
    return _NOT_XML.sub("", text)


def junit_tree(report: RunReport) -> ET.ElementTree:
    root = ET.Element("testsuites", name="dflash-conformance", id=_text(report.run_id))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for engine in report.matrix_engines:
        suite = ET.SubElement(root, "testsuite", name=_text(f"conformance.{engine.name}"))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for case in report.cases:
            tc = ET.SubElement(suite, "testcase", classname=_text(f"conformance.{engine.name}"),
                               name=_text(f"observation[{case.id}]"), time="0")
            counts["tests"] += 1
            obs = report.observation(case.id, engine.name)
            outcome = cell_outcome(report, case.id, engine.name)
            if outcome == "not run":
                ET.SubElement(tc, "skipped", message="not run" + (" (interrupted)" if report.interrupted else ""))
                counts["skipped"] += 1
            elif obs["status"] == "error":
                first = _text(obs["message"]).splitlines()[0] if obs["message"] else "error"
                ET.SubElement(tc, "error", message=first, type="engine-error").text = _text(obs["message"])
                counts["errors"] += 1
            for v in report.verdicts_of(case.id, engine.name):
                suite_name = v.check.split(".", 1)[0]
                tc = ET.SubElement(suite, "testcase", classname=_text(f"conformance.{engine.name}.{suite_name}"),
                                   name=_text(f"{v.check}[{case.id}]"), time="0")
                counts["tests"] += 1
                entry = find(report.expectations, v.check, v.engine, v.case_id)
                if is_finding(v, report.oracles):
                    ET.SubElement(tc, "skipped", message=_text(f"finding about the oracle (not a failure): {v.message}"))
                    counts["skipped"] += 1
                elif entry is not None and v.outcome == "fail":
                    ET.SubElement(tc, "skipped", message=_text(f"expected failure: {entry.describe()}: {v.message}"))
                    counts["skipped"] += 1
                elif entry is not None and v.outcome == "pass":
                    ET.SubElement(tc, "failure", message=_text(f"unexpected pass: expected to fail: {entry.describe()}; "
                                                               "remove the entry"), type="unexpected-pass")
                    counts["failures"] += 1
                elif v.outcome == "fail":
                    ET.SubElement(tc, "failure", message=_text(v.message), type="parity").text = \
                        _text("\n".join((v.message, *v.details)))
                    counts["failures"] += 1
                elif v.outcome == "skip":
                    ET.SubElement(tc, "skipped", message=_text(v.message))
                    counts["skipped"] += 1
        for k, n in counts.items():
            suite.set(k, str(n))
            totals[k] += n
    for k, n in totals.items():
        root.set(k, str(n))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(report: RunReport, path: Path) -> Path:
    """Written atomically (`report.atomic`): a CI job never reads half a file."""
    return write_atomic(Path(path), ET.tostring(junit_tree(report).getroot(), encoding="utf-8", xml_declaration=True))
