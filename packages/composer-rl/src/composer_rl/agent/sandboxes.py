"""Opening a composer-infra sandbox for a task, and grading it with the hidden tests."""

from __future__ import annotations

import os
from pathlib import Path

from composer_infra.sandbox import BackendRegistry, Sandbox, TestReport
from composer_infra.sandbox import Task as SandboxTask
from composer_rl.tasks.model import GRADING_DIR, Task


def sandbox_task(task: Task, files: dict[str, str] | None = None) -> SandboxTask:
    """The composer-infra `Task` a sandbox is opened with for `task`: its repository
    (`files`, default the task's own files, never its hidden tests unless passed here)."""
    return SandboxTask(
        task_id=task.id,
        instruction=task.instruction,
        files=task.files if files is None else files,
        test_command=task.test_command,
    )


def open_sandbox(
    task: Task, backend: str | None = None, registry: BackendRegistry | None = None
) -> Sandbox:
    """A sandbox holding the task's repository (not its hidden tests).

    :param registry: where `backend` is looked up: the job's (`JobPlugins.backends`); None,
        outside a job, is composer-infra's standalone default.
    """
    return Sandbox.create(sandbox_task(task), backend, registry=registry)


def grade_sandbox(sandbox: Sandbox, task: Task) -> TestReport:
    """Run the hidden tests; the sandbox writes them in (as the grader, not through the
    agent's tools) only after every process the policy started is gone."""
    return sandbox.run_tests(hidden_tests=task.tests)


SKIPPED_DIRS = (".", "pytest-of-", "__pycache__", GRADING_DIR)
"""Directory names `workspace_files` does not descend into (by prefix)."""


def in_workspace_listing(path: str) -> bool:
    """Whether `workspace_files` can return the repository file `path` (its count and size
    limits aside): no dot-file, and no part of the path a directory it skips."""
    *dirs, name = path.split("/")
    return not name.startswith(".") and not any(d.startswith(SKIPPED_DIRS) for d in dirs)


def workspace_files(
    sandbox: Sandbox, task: Task, max_files: int = 200, max_bytes: int = 200_000
) -> dict[str, str]:
    """The repository as the episode left it: text files, without hidden tests, caches,
    dot-files or pytest's temporary directories (which tests may create in the workspace),
    never following symbolic links."""
    files: dict[str, str] = {}
    root = sandbox.workspace
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(SKIPPED_DIRS))
        for name in sorted(names):
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if name.startswith(".") or path.is_symlink() or rel in task.tests:
                continue
            if len(files) >= max_files or path.stat().st_size > max_bytes:
                continue
            try:
                files[rel] = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
    return files
