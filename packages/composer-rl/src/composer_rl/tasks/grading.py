"""Run a task's hidden tests against a repository and report per-test outcomes.

This is the plain-subprocess grader: the repository is written to a temporary directory,
the hidden tests are copied in, and `test_command` runs with a JUnit XML report whose
per-test outcomes become a `TestReport`. Evaluation and the RL loop grade inside the
composer-infra sandbox instead; this one validates the suite itself (oracle passes,
unsolved repo fails) and works where no sandbox backend is installed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel, Field

from composer_rl.tasks.model import GRADING_DIR, Task


class TestReport(BaseModel):
    """Outcome of one grading run."""

    __test__ = False  # not a pytest test class

    passed: int = 0
    failed: int = 0
    errors: int = 0
    outcomes: dict[str, str] = Field(default_factory=dict)
    exit_code: int = 0
    output: str = ""

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and self.failed == 0 and self.errors == 0 and self.passed > 0


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def parse_junit(path: Path) -> dict[str, str]:
    """{test id: "passed" | "failed" | "error" | "skipped"} from a pytest JUnit XML file."""
    outcomes: dict[str, str] = {}
    if not path.is_file():
        return outcomes
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        outcomes[name] = outcome
    return outcomes


def test_command_argv(task: Task) -> list[str]:
    argv = shlex.split(task.test_command)
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    return argv


def grade_files(task: Task, files: dict[str, str], timeout: float = 120.0) -> TestReport:
    """Grade a repository state (`files`) against the task's hidden tests."""
    # Imported here: the task suite is part of the light plugin stack (no composer-infra).
    from composer_infra.sandbox.backend import grading_env

    with tempfile.TemporaryDirectory(prefix="composer-grade-") as tmp:
        root = Path(tmp) / "repo"
        write_tree(root, files)
        write_tree(root, task.tests)
        junit = Path(tmp) / "junit.xml"
        try:
            proc = subprocess.run(
                test_command_argv(task),
                cwd=root,
                # As the sandbox grades (composer_infra's `junit_command`).
                env={**os.environ, **grading_env(str(root), str(junit), GRADING_DIR)},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            exit_code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            exit_code, output = 124, f"tests timed out after {timeout:.0f}s"
        outcomes = parse_junit(junit)
    counts = {k: sum(1 for v in outcomes.values() if v == k) for k in ("passed", "failed", "error")}
    return TestReport(
        passed=counts["passed"],
        failed=counts["failed"],
        errors=counts["error"],
        outcomes=outcomes,
        exit_code=exit_code,
        output=output[-4000:],
    )
