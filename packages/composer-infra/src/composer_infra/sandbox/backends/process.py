"""The `process` backend: plain subprocesses with rlimits and a clean environment.

It isolates nothing: the command sees the host's files and network and runs as us.
It exists for development on machines without user namespaces, is never picked as a
default, and warns every time a sandbox is started with it. The README's
containment table lists what it does not contain.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from composer_infra.sandbox.backend import BackendUnavailable, Runtime, SandboxBackend
from composer_infra.sandbox.backends._common import find_tool, processes_of_current_user
from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.execution import run_capped
from composer_infra.sandbox.results import CommandResult


class UnsandboxedWarning(UserWarning):
    """A sandbox was started with no isolation (the `process` backend)."""


class ProcessRuntime(Runtime):
    def __init__(self, workspace: Path, config: SandboxConfig, prlimit: str) -> None:
        self.workspace = workspace
        self.guest_workspace = str(workspace)
        self.config = config
        self._prlimit = prlimit
        self._env = config.command_env(str(workspace))

    def run(self, command: str, *, timeout: float) -> CommandResult:
        # RLIMIT_NPROC counts all of our uid's processes: allow the limit on top of them.
        limits = self.config.limits.prlimit_args(processes_of_current_user())
        return run_capped(
            [self._prlimit, *limits, "--", "/bin/sh", "-c", command],
            env=self._env,
            cwd=str(self.workspace),
            timeout=timeout,
            output_limit=self.config.output_limit,
            output_kill_limit=self.config.output_kill_limit,
        )

    def close(self) -> None:
        """Nothing runs between commands (except what escaped, which we cannot reach)."""


class ProcessBackend(SandboxBackend):
    """No isolation: rlimits, a timeout, an output cap and a clean environment only."""

    name = "process"
    isolation = "none"
    explicit_only = True

    def unavailable_reason(self) -> str | None:
        return None if find_tool("prlimit") else "util-linux's prlimit is missing from /usr/bin"

    def start(
        self,
        workspace: Path,
        config: SandboxConfig,
        *,
        state_dir: Path,
        memory_image: Path | None = None,
    ) -> Runtime:
        if memory_image is not None:
            raise BackendUnavailable("the process backend cannot restore a memory image")
        prlimit = find_tool("prlimit")
        if prlimit is None:
            raise BackendUnavailable("util-linux's prlimit is missing from /usr/bin")
        warnings.warn(
            "sandbox backend 'process' isolates nothing: commands see the host's files and "
            "network; use it only for development",
            UnsandboxedWarning,
            stacklevel=3,
        )
        return ProcessRuntime(workspace, config, prlimit)
