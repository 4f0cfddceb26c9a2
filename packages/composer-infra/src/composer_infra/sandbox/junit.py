"""Turning a test run into structured results.

pytest writes a JUnit XML report when asked (`--junitxml`), which names every test
and its outcome; when the command is not pytest, or it died before writing the
report, the summary line ("3 passed, 1 failed") or the exit code is all we have.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

from composer_infra.sandbox.results import CommandResult, TestCase, TestOutcome, TestReport

_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


def parse_junit(xml_text: str) -> list[TestCase]:
    """The test cases of a JUnit XML report (pytest's `--junitxml` flavour)."""
    root = ElementTree.fromstring(xml_text)
    cases: list[TestCase] = []
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        full = f"{classname.replace('.', '/')}.py::{name}" if classname else name
        outcome: TestOutcome = "passed"
        message = ""
        for child in case:
            if child.tag == "failure":
                outcome, message = "failed", child.get("message", "")
            elif child.tag == "error":
                outcome, message = "error", child.get("message", "")
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message", "")
        cases.append(TestCase(name=full, outcome=outcome, message=message[:500]))
    return cases


def build_report(command: CommandResult, junit_xml: str | None) -> TestReport:
    """The richest report the run allows: JUnit XML, else pytest's summary, else exit code."""
    base = TestReport(
        exit_code=command.exit_code, timed_out=command.timed_out, output=command.output
    )
    if junit_xml:
        try:
            cases = parse_junit(junit_xml)
        except ElementTree.ParseError:
            cases = None
        if cases is not None:
            return base.model_copy(
                update={
                    "passed": sum(c.outcome == "passed" for c in cases),
                    "failed": sum(c.outcome == "failed" for c in cases),
                    "errors": sum(c.outcome == "error" for c in cases),
                    "skipped": sum(c.outcome == "skipped" for c in cases),
                    "tests": tuple(cases),
                    "source": "junit",
                }
            )
    # pytest's last summary line, e.g. "==== 3 passed, 1 failed in 0.12s ====".
    for line in reversed(command.output.splitlines()):
        found = _SUMMARY.findall(line)
        if found and " in " in line:
            counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
            for count, kind in found:
                counts["errors" if kind.startswith("error") else kind] = int(count)
            return base.model_copy(update={**counts, "source": "summary"})
    ok = command.exit_code == 0
    return base.model_copy(update={"passed": int(ok), "failed": int(not ok), "source": "exit_code"})
