"""The `process` backend: plain subprocesses with rlimits and a clean environment.

It isolates nothing: the command sees the host's files and network and runs as us.
It exists for development on machines without user namespaces, is never picked as a
default, and warns every time a sandbox is started with it. The containment
table (docs/infra/containment.md) lists what it does not contain.

Where the host gives us cgroups, each sandbox's commands run in a cgroup of their
own, which bounds their memory and process count together and lets every process
they left behind be killed after each command (a daemon that called setsid, a fork
chain, a process with any name). Running as us, a command could still move itself
out of the cgroup: that is the "isolates nothing" above.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from composer_infra.sandbox.backend import BackendUnavailable, Runtime, SandboxBackend
from composer_infra.sandbox.backends._common import find_tool, processes_of_current_user
from composer_infra.sandbox.cgroups import SandboxCgroup
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
        limits = config.limits
        self.cgroup = SandboxCgroup.create(limits.sandbox_memory_bytes, limits.processes)

    def run(self, command: str, *, timeout: float) -> CommandResult:
        # RLIMIT_NPROC counts all of our uid's processes: allow the limit on top of them.
        limits = self.config.limits.prlimit_args(processes_of_current_user())
        argv = [self._prlimit, *limits, "--", "/bin/sh", "-c", command]
        if self.cgroup is not None:
            argv = [*self.cgroup.enter_argv(), *argv]
        return run_capped(
            argv,
            env=self._env,
            cwd=str(self.workspace),
            timeout=timeout,
            output_limit=self.config.output_limit,
            output_kill_limit=self.config.output_kill_limit,
            after_exit=self.kill_all,
        )

    def kill_all(self) -> None:
        """Every process left in the sandbox's cgroup; without one, what escaped the
        command's process group is out of reach."""
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


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
