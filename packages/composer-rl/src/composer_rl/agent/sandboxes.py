"""Opening a composer-infra sandbox for a task, and grading it with the hidden tests."""

from __future__ import annotations

from composer_infra.sandbox import Sandbox, TestReport
from composer_infra.sandbox import Task as SandboxTask
from composer_rl.tasks.model import Task


def open_sandbox(task: Task, backend: str | None = None) -> Sandbox:
    """A sandbox holding the task's repository (not its hidden tests)."""
    spec = SandboxTask(
        task_id=task.id,
        instruction=task.instruction,
        files=task.files,
        test_command=task.test_command,
    )
    return Sandbox.create(spec, backend)


def grade_sandbox(sandbox: Sandbox, task: Task) -> TestReport:
    """Copy the hidden tests in (as the grader, not through the agent's tools) and run them."""
    for path, content in task.tests.items():
        sandbox.fs.write_bytes(path, content.encode())
    return sandbox.run_tests()


def workspace_files(sandbox: Sandbox, task: Task) -> dict[str, str]:
    """The repository as the episode left it (text files, hidden tests excluded)."""
    files: dict[str, str] = {}
    root = sandbox.workspace
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or rel in task.tests or "__pycache__" in rel or rel.startswith("."):
            continue
        try:
            files[rel] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    return files
