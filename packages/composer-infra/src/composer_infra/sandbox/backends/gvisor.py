"""The gVisor backend: a user-space kernel (`runsc`) with memory-level snapshots.

One sandbox is one gVisor container whose init sleeps; commands enter it with
`runsc exec`. The workspace is a bind mount (shared file access, so the host's file
tools and the sandbox see the same bytes); the system is read-only; there is no
network device but the sandbox's own loopback (`--network=none`); every syscall is
served by gVisor's Sentry, not the host kernel.

Memory-level snapshots: `checkpoint` writes the memory of every process in the
container with `runsc checkpoint`; `resume` (and a fork, or a restore on another
worker) starts a new container from that image with `runsc restore`, so a process
that was running carries on from the same state. This is what the report's VM
platform does with Firecracker snapshots.

After each command, every process in the container except init and the processes
started with `start_background` is killed from inside, so a daemon cannot outlive
the command that started it.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

from composer_infra.sandbox.backend import BackendUnavailable, Runtime, SandboxBackend
from composer_infra.sandbox.backends._common import ETC_DIRS, ETC_FILES, find_tool
from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.execution import run_capped
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult

# Kill every process but init, this shell and the sessions of background processes
# (each is started as a session leader, so its children share its session id); repeat
# until none is left, so a fork bomb's children born during a pass die in the next.
SWEEP_ATTEMPTS = 20
_SWEEP = (
    "i=0; while [ $i -lt 200 ]; do i=$((i+1)); n=0; "
    'for p in /proc/[0-9]*; do p="${p#/proc/}"; '
    '{ [ "$p" = 1 ] || [ "$p" = $$ ]; } && continue; '
    'read -r _ _ _ _ _ sid _ < "/proc/$p/stat" 2>/dev/null || continue; '
    'case " $KEEP " in *" $sid "*) continue;; esac; '
    'kill -9 "$p" 2>/dev/null && n=$((n+1)); done; '
    "[ $n -eq 0 ] && break; done; true"
)


# The container's init: it only reaps. Orphans (a killed fork bomb's children, daemons)
# are reparented to it, and unreaped zombies would count against RLIMIT_NPROC forever.
_INIT = """
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


def _init_python() -> str:
    """An interpreter visible inside the sandbox (the toolchain is mounted read-only)."""
    return os.path.realpath(sys.executable)


def runsc_binary() -> str | None:
    return shutil.which("runsc") or find_tool("runsc")


def _global_flags(root: Path) -> list[str]:
    flags = [f"--root={root}", "--network=none", "--ignore-cgroups", "--file-access-mounts=shared"]
    if os.geteuid() != 0:
        flags.append("--rootless")
    return flags


@functools.cache
def _probe() -> str | None:
    """Whether runsc can start a sandbox on this machine (cached: it takes ~0.2 s)."""
    binary = runsc_binary()
    if binary is None:
        return "runsc (gVisor) is not installed; on Debian/Ubuntu: apt-get install runsc"
    probe_root = Path(f"/tmp/composer-runsc-probe-{os.getpid()}")
    try:
        result = subprocess.run(
            [binary, *_global_flags(probe_root), "do", "/bin/true"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"runsc could not start a sandbox: {exc}"
    finally:
        shutil.rmtree(probe_root, ignore_errors=True)
    if result.returncode != 0:
        tail = result.stderr.decode(errors="replace").strip().splitlines()[-1:]
        return f"runsc could not start a sandbox here: {' '.join(tail) or result.returncode}"
    return None


class GVisorRuntime(Runtime):
    def __init__(
        self,
        binary: str,
        workspace: Path,
        config: SandboxConfig,
        state_dir: Path,
        memory_image: Path | None,
    ) -> None:
        self.workspace = workspace
        self.config = config
        self.binary = binary
        self.state_dir = state_dir
        self.container = f"composer-{uuid.uuid4().hex[:16]}"
        self.flags = _global_flags(state_dir / "runsc")
        self.bundle = state_dir / "bundle"
        self.keep: list[int] = []
        self.running = False
        prlimit = find_tool("prlimit")
        if prlimit is None:
            raise BackendUnavailable("gvisor backend needs util-linux's prlimit in /usr/bin")
        self._limits = [prlimit, *config.limits.prlimit_args(), "--"]
        self._write_bundle()
        self._start(memory_image)

    # -- container lifecycle -----------------------------------------------------------

    def _write_bundle(self) -> None:
        rootfs = self.bundle / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "mode=755"],
            },
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev"],
            },
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
        ]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if Path(top).is_symlink():
                link = rootfs / top.lstrip("/")
                if not link.is_symlink():
                    link.symlink_to(os.readlink(top))
        for name in (*ETC_FILES, *ETC_DIRS):
            if Path(name).exists():
                mounts.append(
                    {
                        "destination": name,
                        "type": "bind",
                        "source": name,
                        "options": ["rbind", "ro"],
                    }
                )
        for path in self.config.toolchain_paths:
            if path.exists():
                mounts.append(
                    {
                        "destination": str(path),
                        "type": "bind",
                        "source": str(path),
                        "options": ["rbind", "ro"],
                    }
                )
        mounts.append(
            {
                "destination": SANDBOX_ROOT,
                "type": "bind",
                "source": str(self.workspace),
                "options": ["rbind", "rw"],
            }
        )
        limits = self.config.limits
        rlimits = [
            {"type": "RLIMIT_NOFILE", "hard": limits.open_files, "soft": limits.open_files},
            {
                "type": "RLIMIT_FSIZE",
                "hard": limits.file_size_bytes,
                "soft": limits.file_size_bytes,
            },
        ]
        self.env = self.config.command_env(SANDBOX_ROOT)
        spec = {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": 0, "gid": 0},
                "args": [_init_python(), "-c", _INIT],
                "env": [f"{k}={v}" for k, v in self.env.items()],
                "cwd": SANDBOX_ROOT,
                "rlimits": rlimits,
                "noNewPrivileges": True,
                "capabilities": {
                    k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")
                },
            },
            "root": {"path": str(rootfs), "readonly": True},
            "hostname": "sandbox",
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            },
        }
        (self.bundle / "config.json").write_text(json.dumps(spec, indent=1))

    def _runsc(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        """One runsc lifecycle command. Its output goes to a file, not a pipe: a detached
        sandbox keeps the descriptors it was started with, and a pipe would never close."""
        log = self.state_dir / "runsc.log"
        with log.open("ab") as sink:
            offset = sink.tell()
            completed = subprocess.run(
                [self.binary, *self.flags, *args],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                timeout=timeout,
                check=False,
            )
        with log.open("rb") as source:
            source.seek(offset)
            completed.stderr = source.read()
        return completed

    def _checked(self, *args: str) -> None:
        result = self._runsc(*args)
        if result.returncode != 0:
            raise RuntimeError(
                f"runsc {args[0]} failed ({result.returncode}): "
                f"{result.stderr.decode(errors='replace').strip()[-2000:]}"
            )

    def _start(self, memory_image: Path | None) -> None:
        if memory_image is None:
            self._checked("run", "--detach", f"--bundle={self.bundle}", self.container)
        else:
            self._checked(
                "restore",
                "--detach",
                f"--image-path={memory_image}",
                f"--bundle={self.bundle}",
                self.container,
            )
        self.running = True

    def _destroy(self) -> None:
        self._runsc("kill", self.container, "KILL", timeout=30)
        self._runsc("delete", "--force", self.container, timeout=30)
        self.running = False

    # -- commands ------------------------------------------------------------------

    def _exec_argv(self, *command: str) -> list[str]:
        env = [f"--env={k}={v}" for k, v in self.env.items()]
        return [
            self.binary,
            *self.flags,
            "exec",
            f"--cwd={SANDBOX_ROOT}",
            *env,
            self.container,
            *command,
        ]

    def _sweep(self) -> None:
        # While a fork bomb still fills the process table, `runsc exec` itself can fail to
        # start the sweep; try again until one sweep has run to the end.
        keep = " ".join(str(p) for p in self.keep)
        for _ in range(SWEEP_ATTEMPTS):
            result = subprocess.run(
                self._exec_argv("/usr/bin/env", f"KEEP={keep}", "/bin/sh", "-c", _SWEEP),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
            if result.returncode == 0:
                return
            time.sleep(0.2)

    def run(self, command: str, *, timeout: float) -> CommandResult:
        return run_capped(
            self._exec_argv(*self._limits, "/bin/sh", "-c", command),
            env={"PATH": "/usr/bin:/bin"},
            timeout=timeout,
            output_limit=self.config.output_limit,
            output_kill_limit=self.config.output_kill_limit,
            after_exit=self._sweep,
        )

    def start_background(self, command: str) -> None:
        # nohup execs setsid, which (not being a group leader) makes a session with the
        # same pid: $! is then the session id the sweep spares.
        launcher = f"nohup setsid /bin/sh -c {_quote(command)} >/dev/null 2>&1 </dev/null & echo $!"
        result = subprocess.run(
            self._exec_argv(*self._limits, "/bin/sh", "-c", launcher),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        pid = result.stdout.decode().strip().splitlines()[-1:] if result.returncode == 0 else []
        if not pid or not pid[0].isdigit():
            raise RuntimeError(
                f"could not start background process: {result.stderr.decode(errors='replace')}"
            )
        self.keep.append(int(pid[0]))

    # -- memory snapshots ------------------------------------------------------------

    def checkpoint(self, image_dir: Path) -> bool:
        image_dir.mkdir(parents=True, exist_ok=True)
        self._checked("checkpoint", f"--image-path={image_dir}", self.container)
        self._runsc("delete", "--force", self.container, timeout=30)
        self.running = False
        (image_dir / "background.json").write_text(json.dumps(self.keep))
        return True

    def resume(self, image_dir: Path) -> None:
        self._start(image_dir)

    def close(self) -> None:
        with suppress(Exception):
            self._destroy()
        shutil.rmtree(self.state_dir / "runsc", ignore_errors=True)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


class GVisorBackend(SandboxBackend):
    """gVisor `runsc`: a user-space kernel per sandbox, checkpoint/restore of memory."""

    name = "gvisor"
    isolation = "gvisor"
    memory_snapshots = True

    def unavailable_reason(self) -> str | None:
        return _probe()

    def start(
        self,
        workspace: Path,
        config: SandboxConfig,
        *,
        state_dir: Path,
        memory_image: Path | None = None,
    ) -> Runtime:
        reason = self.unavailable_reason()
        binary = runsc_binary()
        if reason or binary is None:
            raise BackendUnavailable(reason or "runsc is not installed")
        runtime = GVisorRuntime(binary, workspace, config, state_dir, memory_image)
        if memory_image is not None and (memory_image / "background.json").exists():
            runtime.keep = json.loads((memory_image / "background.json").read_text())
        return runtime
