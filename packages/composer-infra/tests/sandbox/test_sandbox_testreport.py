"""The verdict: the grader's runner report, per test, and every way it fails closed."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from _sandbox_support import TEST_CONFIG

from composer_infra.sandbox import CommandResult, Sandbox, Task
from composer_infra.sandbox.grading import (
    GRADER_CASE,
    GradingRun,
    build_report,
    parse_test_command,
)
from composer_infra.sandbox.mounts import workspace_mount_unavailable

MakeSandbox = Callable[..., Sandbox]


def test_run_tests_reports_each_test(backend: str, make_sandbox: MakeSandbox) -> None:
    """Without hidden tests the workspace's own tests are graded (`python -m pytest`: the
    workspace importable); the runner's folder is gone afterwards."""
    sandbox = make_sandbox(backend)
    before = sandbox.run_tests()
    assert before.source == "grader" and before.failure_reason is None, before
    assert (before.passed, before.failed, before.errors) == (1, 1, 0)
    assert before.outcomes == {
        "tests/test_calc.py::test_add": "failed",
        "tests/test_calc.py::test_zero": "passed",
    }
    assert not before.all_passed
    sandbox.edit_file("calc.py", "a - b", "a + b")
    after = sandbox.run_tests()
    assert after.all_passed and after.passed == 2
    # Nothing of the grader is left in the workspace (it would show up in the diff).
    assert not [p for p in sandbox.workspace.iterdir() if p.name.startswith(".composer")]


def test_collection_error_is_an_error(make_sandbox: MakeSandbox) -> None:
    task = Task(
        instruction="x",
        files={"test_broken.py": "import nonexistent_module\n\ndef test_x():\n    pass\n"},
    )
    report = make_sandbox("bwrap", task).run_tests()
    assert report.errors == 1 and report.passed == 0
    assert report.outcomes == {"test_broken.py": "error"}
    assert not report.all_passed


def test_a_command_that_is_not_pytest_fails_closed(make_sandbox: MakeSandbox) -> None:
    """The grader cannot vouch for another command's verdict: graded failed, not run."""
    task = Task(
        instruction="x",
        files={"ok.sh": "touch ran\nexit 0\n"},
        test_command="sh ok.sh",
    )
    sandbox = make_sandbox("bwrap", task)
    report = sandbox.run_tests()
    assert not report.all_passed and report.source == "none"
    assert "not `python [-P|-I] -m pytest ARGS`" in (report.failure_reason or "")
    assert report.outcomes == {GRADER_CASE: "error"}
    assert not (sandbox.workspace / "ran").exists()


CALC = "def add(a, b):\n    return a + b\n"
PROBE_TEST = (
    "import pytest\nfrom workspace_probe import call\n\n\n"
    "def test_add():\n    assert call('calc', 'add', 2, 3) == 5\n\n\n"
    "def test_later():\n    pytest.skip('not written yet')\n"
)


def test_a_skip_fails_unless_the_task_declares_it(backend: str, make_sandbox: MakeSandbox) -> None:
    hidden = {"_grading/test_calc.py": PROBE_TEST}
    command = "python -P -m pytest -q _grading"
    plain = Task(instruction="x", files={"calc.py": CALC}, test_command=command)
    report = make_sandbox(backend, plain).run_tests(hidden_tests=hidden)
    assert not report.all_passed and report.skipped == 1, report
    reason = report.failure_reason or ""
    assert "_grading/test_calc.py::test_later was skipped (not written yet)" in reason, report
    declared = plain.model_copy(update={"allowed_skips": ("_grading/test_calc.py::test_later",)})
    report = make_sandbox(backend, declared).run_tests(hidden_tests=hidden)
    assert report.all_passed and report.failure_reason is None, report


def test_an_expected_test_missing_from_the_report_fails(make_sandbox: MakeSandbox) -> None:
    """Declared (`expected_tests`) or named in the command (a node id): each must be there."""
    hidden = {"_grading/test_calc.py": PROBE_TEST.split("\n\n\ndef test_later")[0] + "\n"}
    task = Task(
        instruction="x",
        files={"calc.py": CALC},
        test_command="python -P -m pytest -q _grading",
        expected_tests=("_grading/test_calc.py::test_add", "_grading/test_calc.py::test_sub"),
    )
    report = make_sandbox("bwrap", task).run_tests(hidden_tests=hidden)
    assert not report.all_passed and report.outcomes["_grading/test_calc.py::test_add"] == "passed"
    assert "missing from the report: _grading/test_calc.py::test_sub" in (
        report.failure_reason or ""
    )
    named = task.model_copy(
        update={
            "expected_tests": (),
            "test_command": "python -P -m pytest -q _grading/test_calc.py::test_add "
            "_grading/test_calc.py::test_sub",
        }
    )
    report = make_sandbox("bwrap", named).run_tests(hidden_tests=hidden)
    reason = report.failure_reason or ""  # pytest ran nothing: a named test does not exist
    assert not report.all_passed and "expected test(s) missing" in reason, report
    assert "_grading/test_calc.py::test_sub" in reason, report
    only = named.model_copy(update={"test_command": "pytest -q _grading/test_calc.py::test_add"})
    assert make_sandbox("bwrap", only).run_tests(hidden_tests=hidden).all_passed


def test_a_hang_is_a_kill_for_time(make_sandbox: MakeSandbox) -> None:
    task = Task(
        instruction="x",
        files={"calc.py": "def add(a, b):\n    while True:\n        pass\n"},
        test_command="python -P -m pytest -q _grading",
    )
    hidden = {"_grading/test_calc.py": PROBE_TEST.split("\n\n\ndef test_later")[0] + "\n"}
    report = make_sandbox("bwrap", task).run_tests(timeout=4, hidden_tests=hidden)
    assert not report.all_passed and report.timed_out
    assert "ran past its timeout" in (report.failure_reason or ""), report


@pytest.mark.parametrize(
    ("command", "args", "imports"),
    [
        ("python -P -m pytest -q _grading", ("-q", "_grading"), False),
        ("python -I -m pytest _grading", ("_grading",), False),
        ("python3 -B -P -m pytest -x", ("-x",), False),
        ("pytest -q 'a b.py::t[1]'", ("-q", "a b.py::t[1]"), False),
        ("python -m pytest -q", ("-q",), True),
        ("python -m py.test", (), True),
    ],
)
def test_pytest_commands_are_understood(command: str, args: tuple[str, ...], imports: bool) -> None:
    parsed = parse_test_command(command)
    assert not isinstance(parsed, str), parsed
    assert (parsed.args, parsed.import_workspace) == (args, imports)


@pytest.mark.parametrize(
    "command",
    ["sh ok.sh", "cd x && pytest", "X=1 pytest", "python -c 'import pytest'", "python -m foo", ""],
)
def test_other_commands_are_refused(command: str) -> None:
    assert isinstance(parse_test_command(command), str)


# -- the verdict on a report, case by case (the runner's report format, built here) ---------

RUN = GradingRun(
    command=parse_test_command("python -P -m pytest -q _grading"),  # type: ignore[arg-type]
    runner_dir="_grading",
    tests_dir="_grading",
)
PASSING = {"_grading/test_a.py::test_x": {"outcome": "passed", "message": ""}}


def report_bytes(
    tests: dict[str, dict[str, str]] = PASSING, exit_status: int = 0, nonce: str = RUN.nonce
) -> bytes:
    return json.dumps({"nonce": nonce, "exit_status": exit_status, "tests": tests}).encode()


def done(exit_code: int | None = 0, **flags: bool) -> CommandResult:
    return CommandResult(exit_code=exit_code, output="", **flags)


def test_the_runners_report_passes() -> None:
    report = build_report(done(), report_bytes(), RUN)
    assert report.all_passed and report.source == "grader" and report.failure_reason is None


@pytest.mark.parametrize(
    ("command", "data", "reason"),
    [
        (done(), None, "wrote no report"),
        (done(), b"=== 1 passed in 0.01s ===", "does not parse"),
        (done(), json.dumps({"exit_status": 0, "tests": PASSING}).encode(), "has no nonce"),
        (done(), report_bytes(nonce="0" * 64), "nonce is not this grading's"),
        (done(), report_bytes(tests={"t": {"outcome": "fine"}}), "malformed"),
        (done(1), report_bytes(), "exited with status 1 but the runner reported"),
        (done(None, timed_out=True), report_bytes(), "ran past its timeout"),
        (done(None, killed_for_output=True), report_bytes(), "more output than allowed"),
        (done(5), report_bytes(tests={}, exit_status=5), "no tests were collected"),
        (
            done(0),
            report_bytes(tests={"t": {"outcome": "failed", "message": "x"}}, exit_status=0),
            "pytest exited 0 but 1 test(s) did not pass",
        ),
        (done(3), report_bytes(exit_status=3), "status 3 though no test failed"),
        (
            done(),
            report_bytes(tests={**PASSING, "s": {"outcome": "skipped", "message": "later"}}),
            "s was skipped (later)",
        ),
    ],
)
def test_every_doubt_fails_closed(command: CommandResult, data: bytes | None, reason: str) -> None:
    report = build_report(command, data, RUN)
    assert not report.all_passed
    assert reason in (report.failure_reason or ""), report
    assert report.outcomes[GRADER_CASE] == "error" and report.errors >= 1


def test_the_runners_own_doubts_void_every_outcome() -> None:
    """A report whose runner says its test process cannot be believed (a control test that
    must fail passed) counts no test, not even as partial credit."""
    data = json.loads(report_bytes())
    data["problems"] = ["tampering: the grader's control test t_x, which must fail, passed"]
    report = build_report(done(), json.dumps(data).encode(), RUN)
    assert not report.all_passed and report.passed == 0 and report.source == "none"
    assert report.outcomes == {GRADER_CASE: "error"}
    assert "tampering" in (report.failure_reason or "")
    data["problems"] = "not a list"
    assert "malformed" in (
        build_report(done(), json.dumps(data).encode(), RUN).failure_reason or ""
    )


def test_a_full_workspace_fails_the_grading(backend: str, make_sandbox: MakeSandbox) -> None:
    """The policy fills the workspace so the hidden tests cannot be written: a failed
    grade with the reason (an exception would drop the episode instead of failing it)."""
    reason = workspace_mount_unavailable()
    if reason:
        pytest.skip(reason)
    limits = TEST_CONFIG.limits.model_copy(update={"workspace_bytes": 8 * 1024**2})
    config = TEST_CONFIG.model_copy(update={"limits": limits})
    task = Task(
        instruction="x", files={"calc.py": CALC}, test_command="python -P -m pytest -q _grading"
    )
    sandbox = make_sandbox(backend, task, config)
    sandbox.run("head -c 20M /dev/zero > fill; for i in $(seq 64); do echo x > f$i; done")
    report = sandbox.run_tests(hidden_tests={"_grading/test_calc.py": PROBE_TEST})
    assert not report.all_passed, report
    assert "could not write the hidden tests" in (report.failure_reason or ""), report
