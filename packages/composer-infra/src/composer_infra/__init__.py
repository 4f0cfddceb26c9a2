"""Sandboxed coding environments, the delta-compressed weight store, policy-aware checkpoints and the Ray service runtime."""

from composer_infra._lazy import lazy_getattr

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

# -- weight store, checkpoints, Ray runtime (imported on first use: they pull in torch/ray) --
_LAZY_EXPORTS = {
    "composer_infra.store": (
        "FileStore",
        "S3Store",
        "ObjectStore",
        "open_store",
        "PublisherConfig",
        "WeightPublisher",
        "WeightSubscriber",
        "shard_names",
    ),
    "composer_infra.checkpoint": (
        "CheckpointError",
        "StepCheckpointer",
        "GroupStore",
        "FinishedGroup",
        "Trajectory",
        "atomic_write_bytes",
    ),
    "composer_infra.runtime": ("RayRuntime", "RuntimeConfig"),
}
__all__ += [name for names in _LAZY_EXPORTS.values() for name in names]

__getattr__ = lazy_getattr(__name__, _LAZY_EXPORTS)


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
