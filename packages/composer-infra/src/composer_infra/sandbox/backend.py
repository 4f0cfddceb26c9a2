"""What a sandbox backend is: the interface third-party backends implement.

A backend turns a workspace directory into a place where commands run. Files are
read and written by the host (see `paths.py`), so a backend only has to run
commands and, if it can, capture the memory of what is running.
"""

from __future__ import annotations

import os
import secrets
import stat
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Literal

from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.grading.runner import REPORT_NAME
from composer_infra.sandbox.grading.verdict import GradingRun
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult
from composer_infra.sandbox.tree import remove_tree

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

    def kill_all(self) -> None:  # noqa: B027 (a no-op is right for some backends)
        """Kill every process the sandbox's commands started, by pid namespace or cgroup.

        Called before grading: nothing the policy started may still run while the
        tests run or their report is read. Backends whose processes all end with
        their command (bwrap: one pid namespace per command) have nothing to do.
        """

    def grade(self, run: GradingRun, *, timeout: float) -> tuple[CommandResult, bytes | None]:
        """Run the grader's runner (`run`) and return its result and the report it wrote.

        The caller has called `kill_all` and written the runner, the probe and the hidden
        tests (`run.runner_dir`, `run.tests_dir`). This default makes the report's folder
        in the workspace under a random name after the kill, writes the nonce there and
        reads the report once every process of the command is gone; backends that can give
        the test command a directory no other command sees override it (bwrap, gvisor) and
        pass `own_pid_namespace` when the runner is alone in a pid namespace with what it
        starts (it then kills the rest before writing the report).
        """
        name = f".composer-report-{secrets.token_hex(16)}"
        folder = self.workspace / name
        folder.mkdir(mode=0o700)
        try:
            if self.owner is not None:
                os.chown(folder, *self.owner)
            run.write_nonce(folder, self.owner)
            command = run.shell_command(
                self.guest_workspace, f"{self.guest_workspace}/{name}", own_pid_namespace=False
            )
            result = self.run(command, timeout=timeout)
            return result, read_report(folder / REPORT_NAME)
        finally:
            remove_tree(folder)

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


REPORT_LIMIT = 32 * 1024**2
"""The largest grading report read back (a test suite's report is kilobytes)."""


def read_report(path: Path) -> bytes | None:
    """A report file's bytes if it is a regular file (never a FIFO or a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > REPORT_LIMIT:
            return None
        return handle.read(REPORT_LIMIT)
