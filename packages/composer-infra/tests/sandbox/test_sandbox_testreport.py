"""Test results: JUnit XML from pytest in the sandbox, the summary line, the exit code."""

from __future__ import annotations

from collections.abc import Callable

from composer_infra.sandbox import CommandResult, Sandbox, Task
from composer_infra.sandbox.junit import build_report, parse_junit

MakeSandbox = Callable[..., Sandbox]


def test_run_tests_reports_each_test(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    before = sandbox.run_tests()
    assert before.source == "junit"
    assert (before.passed, before.failed, before.errors) == (1, 1, 0)
    assert before.outcomes == {
        "tests/test_calc.py::test_add": "failed",
        "tests/test_calc.py::test_zero": "passed",
    }
    assert not before.all_passed
    sandbox.edit_file("calc.py", "a - b", "a + b")
    after = sandbox.run_tests()
    assert after.all_passed and after.passed == 2
    # The report file is not left in the workspace (it would show up in the diff).
    assert not [p for p in sandbox.workspace.iterdir() if p.name.startswith(".composer-junit")]


def test_collection_error_is_an_error(make_sandbox: MakeSandbox) -> None:
    task = Task(
        instruction="x",
        files={"test_broken.py": "import nonexistent_module\n\ndef test_x():\n    pass\n"},
    )
    report = make_sandbox("bwrap", task).run_tests()
    assert report.errors == 1 and report.passed == 0
    assert not report.all_passed


def test_non_pytest_command_falls_back_to_exit_code(make_sandbox: MakeSandbox) -> None:
    task = Task(instruction="x", files={"ok.sh": "exit 0\n"}, test_command="sh ok.sh")
    report = make_sandbox("bwrap", task).run_tests()
    assert report.source == "exit_code" and report.passed == 1 and report.all_passed


def test_summary_line_when_no_junit() -> None:
    output = "....F\n=== 4 passed, 1 failed, 2 errors in 0.31s ===\n"
    report = build_report(CommandResult(exit_code=1, output=output), None)
    assert (report.source, report.passed, report.failed, report.errors) == ("summary", 4, 1, 2)


def test_corrupt_junit_falls_back() -> None:
    report = build_report(CommandResult(exit_code=1, output="boom"), "<testsuite><testcase")
    assert report.source == "exit_code" and report.failed == 1


def test_parse_junit_outcomes() -> None:
    xml = """<testsuites><testsuite>
      <testcase classname="tests.test_a" name="test_ok"/>
      <testcase classname="tests.test_a" name="test_bad"><failure message="assert 1 == 2"/></testcase>
      <testcase classname="tests.test_a" name="test_err"><error message="fixture"/></testcase>
      <testcase classname="tests.test_a" name="test_skip"><skipped message="later"/></testcase>
    </testsuite></testsuites>"""
    cases = {c.name: (c.outcome, c.message) for c in parse_junit(xml)}
    assert cases == {
        "tests/test_a.py::test_ok": ("passed", ""),
        "tests/test_a.py::test_bad": ("failed", "assert 1 == 2"),
        "tests/test_a.py::test_err": ("error", "fixture"),
        "tests/test_a.py::test_skip": ("skipped", "later"),
    }
