"""The environment service: a pool of sandboxes serving many episodes' tool calls at once."""

from composer_infra.environment.pool import SandboxPool
from composer_infra.environment.service import (
    EnvironmentConfig,
    EnvironmentService,
    ShutdownError,
    ToolCallRequest,
)

__all__ = [
    "EnvironmentConfig",
    "EnvironmentService",
    "SandboxPool",
    "ShutdownError",
    "ToolCallRequest",
]
