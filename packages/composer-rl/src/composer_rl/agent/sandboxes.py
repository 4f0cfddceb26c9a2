"""Opening a composer-infra sandbox for a task, and grading it with the hidden tests.

An episode reaches its sandbox through a `SandboxHandle`, opened by a `Sandboxes`: the
episode loop is the same whether the sandbox is an object in its own process
(`LocalSandboxes`: evaluation from the command line, tests) or lives in the environment
service on another node (`composer_rl.rl.services.environment.ServiceSandboxes`: a Ray
run). Grading is one call of the handle, so it runs next to the sandbox, through
`grade_episode`, wherever that is: the hidden tests never travel to the episode's process
and back, and the fail-closed rules have one home.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from composer_infra.sandbox import (
    BackendRegistry,
    Sandbox,
    Snapshot,
    SnapshotStore,
    TestReport,
    ToolResult,
)
from composer_infra.sandbox import Task as SandboxTask
from composer_infra.sandbox.grading import parse_test_command, refused
from composer_infra.sandbox.sandbox import default_work_dir
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


class SandboxHandle(Protocol):
    """One episode's sandbox, wherever it lives: tool calls, grading, snapshots."""

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """One tool call as the model wrote it; never raises (a failure is an error result)."""
        ...

    def grade(self, task: Task) -> tuple[TestReport, dict[str, str]]:
        """`grade_episode` where the sandbox is: the hidden tests' report and the files left."""
        ...

    def snapshot(self) -> Snapshot:
        """The whole state, in a store a `Sandboxes.restore` (here or elsewhere) reads."""
        ...

    def fork(self) -> SandboxHandle:
        """An independent copy that goes on from here."""
        ...

    def close(self) -> None: ...


class Sandboxes(Protocol):
    """Where an episode runner opens its sandboxes."""

    def open(self, task: Task, backend: str | None = None) -> SandboxHandle:
        """A sandbox holding the task's repository (not its hidden tests)."""
        ...

    def restore(self, snapshot: Snapshot | str) -> SandboxHandle:
        """A sandbox back from a snapshot (taken here, or elsewhere into a shared store)."""
        ...


class LocalSandbox:
    """A `SandboxHandle` on a sandbox in this process."""

    def __init__(self, sandbox: Sandbox, store: Callable[[], SnapshotStore]) -> None:
        self.sandbox = sandbox
        self._store = store

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        return self.sandbox.call(tool, arguments)

    def grade(self, task: Task) -> tuple[TestReport, dict[str, str]]:
        return grade_episode(self.sandbox, task)

    def snapshot(self) -> Snapshot:
        return self.sandbox.snapshot(self._store())

    def fork(self) -> LocalSandbox:
        return LocalSandbox(self.sandbox.fork(), self._store)

    def close(self) -> None:
        self.sandbox.close()


class LocalSandboxes:
    """Sandboxes in this process (`open_sandbox`), snapshots in `store_dir` (default: under
    this process's sandbox directory)."""

    def __init__(
        self, registry: BackendRegistry | None = None, store_dir: Path | None = None
    ) -> None:
        self.registry = registry
        self.store_dir = store_dir
        self._snapshots: SnapshotStore | None = None

    def store(self) -> SnapshotStore:
        if self._snapshots is None:
            self._snapshots = SnapshotStore(self.store_dir or default_work_dir() / "snapshots")
        return self._snapshots

    def open(self, task: Task, backend: str | None = None) -> LocalSandbox:
        return LocalSandbox(open_sandbox(task, backend, self.registry), self.store)

    def restore(self, snapshot: Snapshot | str) -> LocalSandbox:
        restored = Sandbox.restore(snapshot, self.store(), registry=self.registry)
        return LocalSandbox(restored, self.store)


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


def grade_episode(sandbox: Sandbox, task: Task) -> tuple[TestReport, dict[str, str]]:
    """What an episode's end needs of its sandbox: `grade_sandbox`'s report, then the
    repository as the episode left it (`workspace_files`)."""
    return grade_sandbox(sandbox, task), workspace_files(sandbox, task)


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
