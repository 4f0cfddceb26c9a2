"""Sandboxed coding environments: tools, snapshots, and pluggable isolation backends.

from composer_infra.sandbox import Sandbox, SnapshotStore, Task

task = Task(instruction="make the tests pass", files={...}, test_command="python -P -m pytest -q")
with Sandbox.create(task) as sandbox:          # bwrap by default
    sandbox.call("edit_file", {"path": "calc.py", "old": "-", "new": "+"})
    report = sandbox.run_tests(hidden_tests={"_grading/test_x.py": "..."})  # the verdict
    snap = sandbox.snapshot(SnapshotStore(store_dir))
again = Sandbox.restore(snap, SnapshotStore(store_dir))   # here or on another worker
"""

from composer_hooks.todo import TodoItem
from composer_infra.sandbox.archive import Snapshot, SnapshotError, SnapshotStore
from composer_infra.sandbox.backend import (
    BackendUnavailable,
    Runtime,
    SandboxBackend,
)
from composer_infra.sandbox.backends.process import UnsandboxedWarning
from composer_infra.sandbox.config import ResourceLimits, SandboxConfig
from composer_infra.sandbox.hookspecs import hookimpl, hookspec
from composer_infra.sandbox.paths import SANDBOX_ROOT, PathError
from composer_infra.sandbox.registry import (
    DEFAULT_BACKEND,
    BackendRegistry,
    UnknownBackend,
    add_sandbox_hooks,
    default_registry,
)
from composer_infra.sandbox.results import CommandResult, TestCase, TestReport, ToolResult
from composer_infra.sandbox.sandbox import Sandbox, hidden_tests_dir
from composer_infra.sandbox.task import Task
from composer_infra.sandbox.tools import TOOL_ARGS

TOOL_NAMES = tuple(TOOL_ARGS)

__all__ = [
    "DEFAULT_BACKEND",
    "SANDBOX_ROOT",
    "TOOL_NAMES",
    "BackendRegistry",
    "BackendUnavailable",
    "CommandResult",
    "PathError",
    "ResourceLimits",
    "Runtime",
    "Sandbox",
    "SandboxBackend",
    "SandboxConfig",
    "Snapshot",
    "SnapshotError",
    "SnapshotStore",
    "Task",
    "TestCase",
    "TestReport",
    "TodoItem",
    "ToolResult",
    "UnknownBackend",
    "UnsandboxedWarning",
    "add_sandbox_hooks",
    "default_registry",
    "hidden_tests_dir",
    "hookimpl",
    "hookspec",
]
