"""What a sandbox backend is: the interface third-party backends implement.

A backend turns a workspace directory into a place where commands run. Files are
read and written by the host (see `paths.py`), so a backend only has to run
commands and, if it can, capture the memory of what is running.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Literal

from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult

Isolation = Literal["none", "namespaces", "gvisor", "vm", "other"]


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine; the message says what is missing."""


class Runtime(ABC):
    """A backend's live handle on one sandbox.

    `workspace` is the host directory; inside the sandbox it is `/workspace`.
    `owner` is the (uid, gid) commands run as, when that differs from ours.
    """

    workspace: Path
    owner: tuple[int, int] | None = None
    guest_workspace: str = SANDBOX_ROOT
    """The workspace's path as commands in the sandbox see it."""

    @abstractmethod
    def run(self, command: str, *, timeout: float) -> CommandResult:
        """Run a shell command in /workspace; every process it started is gone on return."""

    def start_background(self, command: str) -> None:
        """Start a process that keeps running between commands (memory-level backends)."""
        raise NotImplementedError(
            f"{type(self).__name__} ends every process with its command; background "
            "processes need a backend with memory-level snapshots (gvisor)"
        )

    def checkpoint(self, image_dir: Path) -> bool:
        """Freeze the running processes and write their memory to `image_dir`.

        Returns False when the backend has nothing to save (filesystem-level only).
        After a True, the sandbox stays frozen until `resume(image_dir)`.
        """
        return False

    def resume(self, image_dir: Path) -> None:  # noqa: B027 (optional, no-op by default)
        """Carry on after `checkpoint` (memory-level backends only)."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything; the workspace directory is left for the caller."""


class SandboxBackend(ABC):
    """A kind of sandbox. Register instances through the `composer_sandbox_backends` hook."""

    name: ClassVar[str]
    isolation: ClassVar[Isolation]
    memory_snapshots: ClassVar[bool] = False
    explicit_only: ClassVar[bool] = False
    """Never chosen as a default or fallback; only when asked for by name."""

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when this machine can run the backend, else what is missing and how to get it."""

    @abstractmethod
    def start(
        self,
        workspace: Path,
        config: SandboxConfig,
        *,
        state_dir: Path,
        memory_image: Path | None = None,
    ) -> Runtime:
        """Start a sandbox over `workspace` (already populated).

        `state_dir` is a private directory for the backend (bundles, sockets). With
        `memory_image`, continue the processes saved by `Runtime.checkpoint`.
        """
