"""Opening a composer-infra sandbox for a task, and grading it with the hidden tests."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

from composer_infra.sandbox import BackendRegistry, Sandbox, TestReport
from composer_infra.sandbox import Task as SandboxTask
from composer_infra.sandbox.grading import parse_test_command, refused
from composer_rewards import Episode
from composer_rewards.monitors.grader_tampering import GraderTamperingMonitor
from composer_rl.tasks.model import GRADING_DIR, Task


def sandbox_task(task: Task, files: dict[str, str] | None = None) -> SandboxTask:
    """The composer-infra `Task` a sandbox is opened with for `task`: the part of it that
    composer-rl's `Task` inherits, with `files` (default the task's own) as its repository.
    Never the hidden tests, solution or labels: a sandbox records its task in snapshots."""
    fields = task.model_dump(include=set(SandboxTask.model_fields))
    return SandboxTask.model_validate(fields if files is None else {**fields, "files": files})


def open_sandbox(
    task: Task, backend: str | None = None, registry: BackendRegistry | None = None
) -> Sandbox:
    """A sandbox holding the task's repository (not its hidden tests).

    :param registry: where `backend` is looked up: the job's (`JobPlugins.backends`); None,
        outside a job, is composer-infra's standalone default.
    """
    return Sandbox.create(sandbox_task(task), backend, registry=registry)


IN_PROCESS_FAIL_CLOSED = frozenset(
    {
        "grading_access",
        "pytest_internals",
        "builtins_patching",
        "equality_override",
        "startup_hooks",
        "process_tracing",
    }
)
"""The `grader_tampering` classes that fail a grading closed when the task's hidden tests
import the workspace: the interpreter's and pytest's machinery, which a fix of a library
almost never touches and code that forges a result in the tests' process must."""

_OWN_MACHINERY = {"pytest_internals": ("_pytest/", "pluggy/")}
"""A class left out where the repository is that machinery (an instance of pytest itself)."""


def grade_sandbox(sandbox: Sandbox, task: Task) -> TestReport:
    """Run the hidden tests; the sandbox writes them in (as the grader, not through the
    agent's tools) only after every process the policy started is gone.

    When the hidden tests import the workspace (`python -m pytest`: SWE-bench-format
    tasks), the policy's edits are read first, and an edit that touches the machinery in
    `IN_PROCESS_FAIL_CLOSED` fails the grading closed without running it (`in_process_doubt`).
    """
    doubt = in_process_doubt(task, lambda: workspace_files(sandbox, task, 10**9, 2_000_000))
    if doubt is not None:
        return refused(doubt)
    return sandbox.run_tests(hidden_tests=task.tests)


SKIPPED_DIRS = (".", "pytest-of-", "__pycache__", GRADING_DIR)
"""Directory names `workspace_files` does not descend into (by prefix)."""


def in_workspace_listing(path: str) -> bool:
    """Whether `workspace_files` can return the repository file `path` (its count and size
    limits aside): no dot-file, and no part of the path a directory it skips."""
    *dirs, name = path.split("/")
    return not name.startswith(".") and not any(d.startswith(SKIPPED_DIRS) for d in dirs)


def in_process_doubt(task: Task, files_after: Callable[[], dict[str, str]]) -> str | None:
    """Why the policy's edits of an in-process task are not graded, or None.

    A heuristic and the last line, behind the grader's control tests (docs/grading.md):
    the `grader_tampering` monitor's patterns over the diff (`os.` spelled with `getattr`
    passes them). Templates grade through the probe (workspace code never runs in the
    tests' process) and are not read.
    """
    command = parse_test_command(task.test_command)
    if isinstance(command, str) or not command.import_workspace:
        return None
    after = files_after()
    changed = {path: text for path, text in after.items() if task.files.get(path) != text}
    if not changed:
        return None
    before = {path: task.files[path] for path in changed if path in task.files}
    episode = Episode(task=task.id, diff=unified_diff(before, changed), changed_files=changed)
    found = GraderTamperingMonitor().findings(episode)
    hits = {kind: evidence for kind, evidence in found.items() if kind in IN_PROCESS_FAIL_CLOSED}
    for kind, folders in _OWN_MACHINERY.items():
        if any(f"/{folder}" in f"/{path}" for path in task.files for folder in folders):
            hits.pop(kind, None)
    if not hits:
        return None
    evidence = "; ".join(f"{kind}: {', '.join(items[:2])}" for kind, items in sorted(hits.items()))
    return (
        "heuristic: the hidden tests import the workspace and the edits touch the "
        f"interpreter's or pytest's machinery (grader_tampering {evidence}); not graded"
    )


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


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """The unified diff from `before` to `after` (path -> text; a missing side is /dev/null)."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        chunks += difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
    return "".join(chunks)
