"""Sandboxed coding environments, the delta-compressed weight store, policy-aware checkpoints and the Ray service runtime."""

# -- sandboxes and the environment service (light: pydantic, pluggy, zstandard) --
from composer_infra.environment import (
    EnvironmentConfig,
    EnvironmentService,
    SandboxPool,
    ToolCallRequest,
)
from composer_infra.sandbox import (
    TOOL_NAMES,
    BackendRegistry,
    BackendUnavailable,
    CommandResult,
    ResourceLimits,
    Sandbox,
    SandboxBackend,
    SandboxConfig,
    Snapshot,
    SnapshotError,
    SnapshotStore,
    Task,
    TestCase,
    TestReport,
    ToolResult,
)

__version__ = "0.1.0"

__all__ = ["__version__"]

__all__ += [  # sandboxes and the environment service
    "TOOL_NAMES",
    "BackendRegistry",
    "BackendUnavailable",
    "CommandResult",
    "EnvironmentConfig",
    "EnvironmentService",
    "ResourceLimits",
    "Sandbox",
    "SandboxBackend",
    "SandboxConfig",
    "SandboxPool",
    "Snapshot",
    "SnapshotError",
    "SnapshotStore",
    "Task",
    "TestCase",
    "TestReport",
    "ToolCallRequest",
    "ToolResult",
]
