"""Typed configuration of a sandbox: resource limits and what the sandbox may see.

Per-process limits are rlimits, so every backend can apply them the same way
(through `prlimit` in front of the command); they are what bound a fork bomb or a
memory hog to seconds instead of taking the host down. Per-sandbox totals (memory
and processes of all its processes together) are a cgroup where the host allows one
(`cgroups.py`), and /tmp is a size-limited tmpfs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ResourceLimits(BaseModel):
    """Per-command resource limits (rlimits) applied inside the sandbox."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_seconds: int = Field(default=120, ge=1, description="RLIMIT_CPU of each process.")
    memory_bytes: int = Field(
        default=2 * 1024**3, ge=64 * 1024**2, description="RLIMIT_AS (address space)."
    )
    processes: int = Field(
        default=128, ge=4, description="RLIMIT_NPROC: processes of the sandbox user."
    )
    file_size_bytes: int = Field(
        default=256 * 1024**2, ge=1024, description="RLIMIT_FSIZE: the largest file it may write."
    )
    open_files: int = Field(default=256, ge=16, description="RLIMIT_NOFILE.")
    tmp_bytes: int = Field(default=256 * 1024**2, ge=1024**2, description="Size of /tmp (tmpfs).")
    workspace_bytes: int = Field(
        default=1024**3,
        ge=1024**2,
        description=(
            "Total size of the workspace: a tmpfs of this size when the host side is root "
            "(see `composer_infra.sandbox.mounts`); else only `file_size_bytes` per file."
        ),
    )
    sandbox_memory_bytes: int = Field(
        default=4 * 1024**3,
        ge=64 * 1024**2,
        description=(
            "Memory of all the sandbox's processes together (cgroup memory limit; "
            "`processes` is then also the cgroup's pids.max). Applied where the host "
            "gives us cgroups (see `composer_infra.sandbox.cgroups`)."
        ),
    )

    def prlimit_args(self, processes_already: int = 0) -> list[str]:
        """Arguments of util-linux `prlimit` that set these limits (soft = hard).

        RLIMIT_NPROC counts every process of the user, not only the sandbox's; when
        sandboxes share our uid, `processes_already` (ours, now) is added on top.
        """
        return [
            f"--cpu={self.cpu_seconds}",
            f"--as={self.memory_bytes}",
            f"--nproc={self.processes + processes_already}",
            f"--fsize={self.file_size_bytes}",
            f"--nofile={self.open_files}",
        ]


def _default_toolchain() -> tuple[Path, ...]:
    """The running Python (virtualenv and its base interpreter), so tasks can run pytest."""
    paths: list[Path] = []
    for prefix in (sys.prefix, sys.base_prefix):
        path = Path(prefix).resolve()
        if path not in paths and not path.is_relative_to("/usr"):
            paths.append(path)
    return tuple(paths)


class SandboxConfig(BaseModel):
    """How a sandbox is made. The defaults suit a coding task with a Python test suite."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    command_timeout: float = Field(
        default=60.0, gt=0, description="Default wall-clock limit of one `run`, seconds."
    )
    max_command_timeout: float = Field(
        default=600.0, gt=0, description="The most a `run` call may ask for, seconds."
    )
    output_limit: int = Field(
        default=64 * 1024, ge=256, description="Bytes of a command's output returned to the agent."
    )
    output_kill_limit: int = Field(
        default=32 * 1024**2,
        ge=1024,
        description="A command that writes more than this many bytes is killed.",
    )
    read_limit: int = Field(
        default=512 * 1024, ge=1024, description="Largest file `read_file` returns, bytes."
    )
    toolchain_paths: tuple[Path, ...] = Field(
        default_factory=_default_toolchain,
        description="Host directories mounted read-only at the same path (interpreters).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables of sandbox commands (the rest is clean).",
    )

    @field_validator("toolchain_paths")
    @classmethod
    def _absolute(cls, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        for path in paths:
            if not path.is_absolute():
                raise ValueError(f"toolchain path {path} must be absolute")
        return paths

    def command_env(self, workspace: str) -> dict[str, str]:
        """The whole environment of a sandbox command: nothing of the host's leaks in."""
        bin_dirs = [str(p / "bin") for p in self.toolchain_paths]
        env = {
            "PATH": ":".join([*bin_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": workspace,
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            # The sandbox's interpreter is the host's environment, with whatever pytest
            # plugins it holds (hypothesis, xdist, ...): a repository's own test run loads
            # none of them, as in the repository's own environment, and a run takes 0.5 s
            # instead of 2.3 s (most of a demonstration's time, most of an agent's `run`).
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        env.update(self.env)
        return env
