"""Run a task's hidden tests against a repository and report per-test outcomes.

This is the plain-subprocess grader: the repository is written to a temporary directory,
the hidden tests go into `_grading/` with the grader's runner and `workspace_probe.py`
beside them, and the runner runs the task's pytest arguments exactly as the sandbox's
grader does (composer-infra's `composer_infra.sandbox.grading`: the same runner, the same
nonce-signed report, the same fail-closed verdict), so `composer-rl tasks validate` and a
sandbox agree. The interpreter starts isolated (`-I`) in a clean environment. Evaluation and
the RL loop grade inside the composer-infra sandbox instead; this one validates the suite
itself (oracle passes, unsolved repo fails) and works where no sandbox backend is installed.

What it does not have, being no sandbox: a pid namespace (a process workspace code leaves
behind is not killed before the report is written; the exit status must still agree with
the report) and any containment of the code it runs.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from composer_rl.tasks.model import GRADING_DIR, Task

OUTPUT_LIMIT = 64 * 1024
OUTPUT_KILL_LIMIT = 32 * 1024**2


class TestReport(BaseModel):
    """Outcome of one grading run (`failure_reason`: why it failed closed, if it did)."""

    __test__ = False  # not a pytest test class

    passed: int = 0
    failed: int = 0
    errors: int = 0
    outcomes: dict[str, str] = Field(default_factory=dict)
    exit_code: int = 0
    output: str = ""
    failure_reason: str | None = None

    @property
    def success(self) -> bool:
        return (
            self.failure_reason is None
            and self.exit_code == 0
            and self.failed == 0
            and self.errors == 0
            and self.passed > 0
        )


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def clean_env(root: Path) -> dict[str, str]:
    """The runner's whole environment: nothing of this process's (no PYTHONPATH, no
    PYTEST_ADDOPTS, no credentials) reaches the code under test."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "TMPDIR": tempfile.gettempdir(),
    }


def grade_files(task: Task, files: dict[str, str], timeout: float = 120.0) -> TestReport:
    """Grade a repository state (`files`) against the task's hidden tests."""
    # Imported here: the task suite is part of the light plugin stack (no composer-infra).
    from composer_infra.sandbox.execution import run_capped
    from composer_infra.sandbox.grading import (
        GradingRun,
        build_report,
        grader_files,
        parse_test_command,
    )
    from composer_infra.sandbox.grading.runner import REPORT_NAME

    command = parse_test_command(task.test_command)
    if isinstance(command, str):
        return TestReport(
            errors=1,
            outcomes={"<grader>": "error"},
            exit_code=-1,
            output=command,
            failure_reason=command,
        )
    run = GradingRun(command=command, runner_dir=GRADING_DIR, tests_dir=GRADING_DIR)
    with tempfile.TemporaryDirectory(prefix="composer-grade-") as tmp:
        root = Path(tmp) / "repo"
        write_tree(root, files)
        write_tree(root, {**task.tests, **grader_files(run)})
        # The report's folder is outside the repository, under a name the code cannot know.
        report_dir = Path(tmp) / f"report-{secrets.token_hex(8)}"
        report_dir.mkdir(mode=0o700)
        run.write_nonce(report_dir)
        argv = run.argv(str(root), str(report_dir), own_pid_namespace=False)
        argv[0] = sys.executable
        result = run_capped(
            argv,
            env=clean_env(root),
            cwd=str(root),
            timeout=timeout,
            output_limit=OUTPUT_LIMIT,
            output_kill_limit=OUTPUT_KILL_LIMIT,
        )
        report_path = report_dir / REPORT_NAME
        report = report_path.read_bytes() if report_path.is_file() else None
    verdict = build_report(result, report, run, output_kill_limit=OUTPUT_KILL_LIMIT)
    return TestReport(
        passed=verdict.passed,
        failed=verdict.failed,
        errors=verdict.errors,
        outcomes=dict(verdict.outcomes),
        exit_code=124
        if result.timed_out
        else (result.exit_code if result.exit_code is not None else -9),
        output=result.output[-4000:],
        failure_reason=verdict.failure_reason,
    )
