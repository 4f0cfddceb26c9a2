"""From a task's test command to a verdict: what the grader runs and what it believes.

The grader believes one thing: the report its own runner (`runner.py`) wrote, signed with
the nonce of this grading, whose exit status is the test command's. Everything else the
policy could have shaped (pytest's output, a summary line, an exit code on its own, a file
it planted where the report goes) is at most a reason to fail. So `build_report` fails
closed: no report, a report without this grading's nonce or that does not parse, a test
the task expects that is not in it, a skip the task did not declare, an exit status that
disagrees with the outcomes, or a kill for time or output is a failed `TestReport` whose
`failure_reason` says which, never a pass and never an exception that drops the episode.
A report whose runner lists `problems` (hidden tests that import the workspace: a control
test that ran otherwise than it must, a test process that did not finish) is refused
outright: no outcome of that test process counts.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from composer_infra.sandbox.grading.canaries import matches
from composer_infra.sandbox.grading.runner import NONCE_NAME, REPORT_NAME, RUNNER_MODULE
from composer_infra.sandbox.results import CommandResult, TestCase, TestOutcome, TestReport

GRADER_CASE = "<grader>"
"""The id of the `error` case a failed verdict adds, with the reason as its message: code
that only counts outcomes (a reward's passed / total) counts the grading as an error too."""

RUNNER_FILE = f"{RUNNER_MODULE}.py"
OUTCOMES: frozenset[str] = frozenset({"passed", "failed", "error", "skipped"})
_PYTHONS = ("python", "python3")
_PYTHON_FLAGS = frozenset({"-P", "-I", "-B", "-E", "-s", "-u"})
_STRICT_FLAGS = frozenset({"-P", "-I"})
_PYTEST_MODULES = ("pytest", "py.test")


@dataclass(frozen=True)
class PytestCommand:
    """A task's test command as the grader understands it: pytest and its arguments.

    `import_workspace` is Python's own reading of the command: `python -m pytest` puts the
    working directory (the workspace) on `sys.path`, `-P`, `-I` and the `pytest` script do
    not. The runner then appends the workspace after the standard library (never first).
    """

    python: str
    args: tuple[str, ...]
    import_workspace: bool

    @property
    def named_tests(self) -> tuple[str, ...]:
        """Node ids the command names (`path::test`): each must be in the report."""
        return tuple(a for a in self.args if "::" in a and not a.startswith("-"))


def parse_test_command(command: str) -> PytestCommand | str:
    """`python [flags] -m pytest ARGS` or `pytest ARGS`, else why the grader will not run it.

    The grader runs pytest under its own runner and reads only the runner's report, so a
    command it cannot turn into pytest arguments (a shell script, `cd x && pytest`, an
    environment assignment) would be a verdict it cannot vouch for: it is refused.
    """
    why = (
        f"the task's test command {command!r} is not `python [-P|-I] -m pytest ARGS` or "
        "`pytest ARGS`: the grader runs pytest under its own runner and trusts no other "
        "command's verdict"
    )
    try:
        words = shlex.split(command)
    except ValueError:
        return why
    if not words:
        return why
    if words[0] in _PYTEST_MODULES:
        return PytestCommand(python="python", args=tuple(words[1:]), import_workspace=False)
    if words[0] not in _PYTHONS:
        return why
    flags: set[str] = set()
    index = 1
    while index < len(words) and words[index] in _PYTHON_FLAGS:
        flags.add(words[index])
        index += 1
    if words[index : index + 1] != ["-m"] or index + 1 >= len(words):
        return why
    if words[index + 1] not in _PYTEST_MODULES:
        return why
    return PytestCommand(
        python=words[0],
        args=tuple(words[index + 2 :]),
        import_workspace=not (flags & _STRICT_FLAGS),
    )


@dataclass(frozen=True)
class GradingRun:
    """One grading: the runner's place in the workspace, the hidden tests' folder, and the
    nonce that signs this grading's report (fresh from `secrets` for every grading)."""

    command: PytestCommand
    runner_dir: str
    """Workspace-relative folder the runner and `workspace_probe.py` are written to."""
    tests_dir: str | None
    """Workspace-relative folder of the hidden tests (deleted by the runner after collection)."""
    nonce: str = field(default_factory=lambda: secrets.token_hex(32), repr=False)

    def argv(self, workspace: str, report_dir: str, *, own_pid_namespace: bool) -> list[str]:
        """The runner's command line: paths as the test command sees them, no secret in it."""
        argv = [
            self.command.python,
            "-I",
            "-B",
            f"{workspace}/{self.runner_dir}/{RUNNER_FILE}",
            "--report",
            f"{report_dir}/{REPORT_NAME}",
            "--nonce-file",
            f"{report_dir}/{NONCE_NAME}",
            "--workspace",
            workspace,
        ]
        if self.tests_dir is not None:
            argv += ["--tests-dir", f"{workspace}/{self.tests_dir}"]
        if self.command.import_workspace:
            argv.append("--import-workspace")
        if own_pid_namespace:
            argv.append("--own-pid-namespace")
        return [*argv, "--", *self.command.args]

    def shell_command(self, workspace: str, report_dir: str, *, own_pid_namespace: bool) -> str:
        """The runner as a sandbox command: `exec`, so the runner is the command's process
        (in gVisor the init of its pid namespace) and its exit status the command's."""
        argv = self.argv(workspace, report_dir, own_pid_namespace=own_pid_namespace)
        return "exec " + shlex.join(argv)

    def write_nonce(self, report_dir: Path, owner: tuple[int, int] | None = None) -> None:
        """The nonce file the runner reads and deletes first (0600, the sandbox user's)."""
        path = report_dir / NONCE_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, self.nonce.encode())
        finally:
            os.close(fd)
        if owner is not None:
            os.chown(path, *owner)


def refused(reason: str, command: CommandResult | None = None) -> TestReport:
    """A failed verdict with nothing the grader believes in it."""
    return failed_verdict(reason, (), command)


def failed_verdict(
    reason: str, cases: Sequence[TestCase], command: CommandResult | None
) -> TestReport:
    """`cases` (as the runner recorded them, or none) plus the grader's own error case."""
    grader = TestCase(name=GRADER_CASE, outcome="error", message=reason[:2000])
    return _report([*cases, grader], command, reason, source="grader" if cases else "none")


def _report(
    cases: Sequence[TestCase],
    command: CommandResult | None,
    reason: str | None,
    source: str,
) -> TestReport:
    counts = {k: sum(c.outcome == k for c in cases) for k in OUTCOMES}
    return TestReport(
        passed=counts["passed"],
        failed=counts["failed"],
        errors=counts["error"],
        skipped=counts["skipped"],
        tests=tuple(cases),
        exit_code=command.exit_code if command else None,
        timed_out=command.timed_out if command else False,
        output=command.output if command else "",
        source=source,  # type: ignore[arg-type]
        failure_reason=reason,
    )


def _parse(report: bytes, nonce: str) -> tuple[int, list[TestCase], list[str]] | str:
    """(pytest's exit status, the cases, the runner's own reasons to fail the grading) from
    the runner's report, or why it is not one."""
    try:
        data = json.loads(report.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "the report is not the grader's: it does not parse"
    if not isinstance(data, dict) or not isinstance(data.get("nonce"), str):
        return "the report is not the grader's: it has no nonce"
    if not secrets.compare_digest(data["nonce"].encode(), nonce.encode()):
        return "the report is not the grader's: its nonce is not this grading's"
    status, tests, problems = data.get("exit_status"), data.get("tests"), data.get("problems", [])
    if type(status) is not int or not isinstance(tests, dict):
        return "the grader's report is malformed (exit status or tests)"
    if type(problems) is not list or not all(type(p) is str for p in problems):
        return "the grader's report is malformed (problems)"
    cases: list[TestCase] = []
    for name, entry in tests.items():
        if not isinstance(entry, dict) or entry.get("outcome") not in OUTCOMES:
            return f"the grader's report is malformed at {name!r}"
        outcome: TestOutcome = entry["outcome"]
        cases.append(TestCase(name=name, outcome=outcome, message=str(entry.get("message", ""))))
    return status, cases, problems


def build_report(
    command: CommandResult,
    report: bytes | None,
    run: GradingRun,
    *,
    expected_tests: Iterable[str] = (),
    allowed_skips: Iterable[str] = (),
    output_kill_limit: int | None = None,
) -> TestReport:
    """The verdict of one grading (see the module doc for what fails it).

    `command` is the test command's result; `report` the bytes at the report path once
    every process of it was gone (None: no such file); `expected_tests` the ids the task
    expects (with the node ids the command names), `allowed_skips` those that may skip.
    """
    reasons: list[str] = []
    if command.timed_out:
        reasons.append("the test command ran past its timeout and was killed")
    if command.killed_for_output:
        limit = f" ({output_kill_limit} bytes)" if output_kill_limit else ""
        reasons.append(f"the test command wrote more output than allowed{limit} and was killed")
    parsed = (
        _parse(report, run.nonce)
        if report is not None
        else (
            f"the grader's runner wrote no report (the test command exited with status "
            f"{command.exit_code})"
        )
    )
    if isinstance(parsed, str):
        return refused("; ".join([*reasons, parsed]), command)
    status, cases, problems = parsed
    if problems:
        # The runner's own doubts (a control test that ran otherwise than it must, a test
        # process that did not finish): no outcome of that test process counts, not even
        # as partial credit.
        return refused("; ".join([*reasons, *problems]), command)
    ids = [c.name for c in cases]
    if command.exit_code != status:
        reasons.append(
            f"the test command exited with status {command.exit_code} but the runner "
            f"reported pytest's exit status {status}"
        )
    if not cases:
        reasons.append("no tests were collected")
    missing = [
        e
        for e in (*expected_tests, *run.command.named_tests)
        if not any(matches(i, e) for i in ids)
    ]
    if missing:
        reasons.append(
            f"expected test(s) missing from the report: {', '.join(sorted(set(missing)))}"
        )
    allowed = tuple(allowed_skips)
    undeclared = [
        c for c in cases if c.outcome == "skipped" and not any(matches(c.name, a) for a in allowed)
    ]
    for case in undeclared[:5]:
        reasons.append(
            f"{case.name} was skipped ({case.message or 'no reason given'}) and the task does "
            "not declare that skip (Task.allowed_skips)"
        )
    bad = [c for c in cases if c.outcome in ("failed", "error")]
    if status == 0 and bad:
        reasons.append(f"pytest exited 0 but {len(bad)} test(s) did not pass")
    if status != 0 and cases and not bad:
        reasons.append(f"pytest exited with status {status} though no test failed")
    if reasons:
        return failed_verdict("; ".join(reasons), cases, command)
    return _report(cases, command, None, source="grader")
