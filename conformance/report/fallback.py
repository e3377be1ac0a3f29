"""The report of last resort: when rendering the full page or the JUnit tree raises on what an
engine reported, the run directory still ends with a valid index.html and junit.xml.

Contract: `fallback_html(report, error)` and `fallback_junit(report, error)` return a plain page and
a JUnit document (bytes, UTF-8) holding the rendering error and every verdict and observation status
as escaped text; they use nothing of the full report's templates or charts, only `str()`, so what
broke those cannot break these.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET

from conformance.report.model import RunReport


def _plain(value: object) -> str:
    """Text that UTF-8 and XML can hold: a lone surrogate written as its escape, control bytes dropped."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c for c in text if c in "\t\n" or ord(c) >= 0x20 and c not in "\ufffe\uffff")


def _error_line(error: BaseException) -> str:
    return _plain(f"{type(error).__name__}: {error}")[:2000]


def fallback_html(report: RunReport, error: BaseException) -> bytes:
    e = lambda v: html.escape(_plain(v))  # noqa: E731
    rows = "".join(f"<tr><td>{e(v.engine)}</td><td>{e(v.case_id)}</td><td>{e(v.check)}</td><td>{e(v.outcome)}</td>"
                   f"<td>{e(v.message[:2000])}</td></tr>" for v in report.verdicts)
    statuses = "".join(f"<tr><td>{e(engine)}</td><td>{e(case_id)}</td><td>{e(obs.get('status'))}</td></tr>"
                       for (case_id, engine), obs in report.observations.items())
    page = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{e(report.title)} {e(report.run_id)}</title>"
            f"</head><body><h1>{e(report.title)} {e(report.run_id)}</h1>"
            f"<p><strong>The full report could not be rendered</strong>: {e(_error_line(error))}. "
            f"The verdicts below are complete; observations.jsonl holds every observation.</p>"
            f"<h2>Observations</h2><table><tr><th>engine</th><th>case</th><th>status</th></tr>{statuses}</table>"
            f"<h2>Verdicts</h2><table><tr><th>engine</th><th>case</th><th>check</th><th>outcome</th><th>message</th></tr>"
            f"{rows}</table></body></html>\n")
    return page.encode("utf-8")


def fallback_junit(report: RunReport, error: BaseException) -> bytes:
    root = ET.Element("testsuites", name="dflash-conformance", id=_plain(report.run_id))
    suite = ET.SubElement(root, "testsuite", name="conformance.report")
    tc = ET.SubElement(suite, "testcase", classname="conformance.report", name="junit.xml", time="0")
    ET.SubElement(tc, "error", message=_error_line(error), type="report-error")
    failures = 0
    for v in report.verdicts:
        tc = ET.SubElement(suite, "testcase", classname=_plain(f"conformance.{v.engine}"),
                           name=_plain(f"{v.check}[{v.case_id}]"), time="0")
        if v.failed:
            failures += 1
            ET.SubElement(tc, "failure", message=_plain(v.message)[:2000], type="parity")
    for k, n in (("tests", len(report.verdicts) + 1), ("failures", failures), ("errors", 1), ("skipped", 0)):
        suite.set(k, str(n))
        root.set(k, str(n))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
