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

Every command runs in a pid namespace of its own inside the container (`unshare
--pid --fork --kill-child`, entered as root with only the capabilities that needs,
which a small Python start (`_seccomp.command_start_argv`: rlimits, the switch to the
sandbox's unprivileged uid with no capabilities, no_new_privs, a seccomp filter that
refuses new user namespaces) then drops before it execs the shell). When
the command's shell exits, gVisor kills every process of that namespace, as Linux
does: a daemon, a fork chain or a process with a newline in its name cannot
outlive the command, and one holding the command's output open cannot make `run`
wait for its timeout. On a timeout the namespace's creator is killed by its pid
(`--internal-pid-file`), which takes the namespace with it. `kill_all` (before
grading) kills every process in the container but its init with `kill(-1)` from
inside, background processes included.

Files: commands run as a fresh unprivileged uid (so what they make is owned by it
on the host, never by root); the workspace is mounted nosuid and nodev; /tmp is a
tmpfs of `tmp_bytes`, mode 1777. Grading (after `kill_all`) writes its report into a
directory the host makes under /composer-grading with a random name, after the
kill, and reads once the test command's namespace is gone (see `grade`).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import select
import shutil
import subprocess
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

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
)
from composer_infra.sandbox.backends._seccomp import command_start_argv
from composer_infra.sandbox.backends.bwrap import guest_python
from composer_infra.sandbox.cgroups import SandboxCgroup
from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.execution import run_capped
from composer_infra.sandbox.grading.runner import REPORT_NAME
from composer_infra.sandbox.grading.verdict import GradingRun
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult
from composer_infra.sandbox.tree import remove_tree

# Run as root inside the container with these capabilities only: enough to make the
# command's pid namespace and to switch to the sandbox user, which drops them all.
_COMMAND_CAPS = tuple(
    f"--cap={cap}" for cap in ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
)
# kill(-1) signals every process but init and the caller; repeat until none is left
# (a process forked while the kill went round dies in the next pass).
_KILL_ALL = "n=0; while kill -9 -1 2>/dev/null && [ $n -lt 100000 ]; do n=$((n+1)); done; true"
GRADING_DIR = "/composer-grading"
KILL_ATTEMPTS = 20
SENTRY_OVERHEAD_BYTES = 64 * 1024**2
"""Memory of the Sentry and the gofer themselves, on top of `sandbox_memory_bytes`."""
UNCOUNTED_PIDS = 1 << 22
"""pids.max of a gVisor sandbox's cgroup: pid_max, no limit (its pids are Sentry threads)."""


# The container's init: it only reaps. Orphans (a killed fork bomb's children, daemons)
# are reparented to it, and unreaped zombies would count against RLIMIT_NPROC forever.
# dash waits for its foreground `sleep` with waitpid(-1), which reaps every child, the
# reparented orphans included. It was a Python loop around os.wait(); a shell and a
# sleep are a tenth of its memory, and every checkpoint saves and every restore loads
# the init's memory: restore went from ~330 to ~240 ms
# (docs/infra/2026-sandbox-throughput.md). (gVisor here
# does not auto-reap for an init that ignores SIGCHLD, so `sleep infinity` would not do.)
_INIT_ARGV = ["/bin/sh", "-c", "while :; do sleep 3600; done"]


def wait_exited(process: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait for `process` and return its exit status, waking the moment it exits.

    `Popen.wait(timeout)` polls with sleeps that double up to 50 ms, so a runsc
    command that took 150 ms was noticed up to 50 ms late (a quarter of a restore);
    a pidfd wakes us exactly. Past `timeout` the process is killed and
    `subprocess.TimeoutExpired` raised, as `subprocess.run` does.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel): the polling wait
        pidfd = None
    if pidfd is not None:
        try:
            ready, _, _ = select.select([pidfd], [], [], timeout)
        finally:
            os.close(pidfd)
        if ready:
            return process.wait()
    try:
        return process.wait(timeout=0 if pidfd is not None else timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def runsc_binary() -> str | None:
    return shutil.which("runsc") or find_tool("runsc")


def _global_flags(root: Path) -> list[str]:
    flags = [
        f"--root={root}",
        "--network=none",
        "--ignore-cgroups",
        "--file-access-mounts=shared",
    ]
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
        self.grading = state_dir / "grading"
        self.keep: list[int] = []
        self.running = False
        self.cgroup: SandboxCgroup | None = None
        self._oom_kills: int | None = None
        tools = {name: find_tool(name) for name in ("unshare",)}
        missing = [name for name, path in tools.items() if path is None]
        if missing:
            raise BackendUnavailable(f"gvisor backend needs util-linux's {', '.join(missing)}")
        saved_owner = memory_image / "owner.json" if memory_image is not None else None
        if saved_owner is not None and saved_owner.exists():
            # The saved processes run as the uid they were started with.
            uid, gid = json.loads(saved_owner.read_text())
            self.owner: tuple[int, int] | None = (uid, gid)
        else:
            self.owner = allocate_owner()
        give_tree(workspace, self.owner)
        uid, gid = self.owner or (0, 0)
        python = guest_python(config)
        (state_dir / "passwd").write_text(PASSWD_TEMPLATE.format(uid=uid, gid=gid))
        (state_dir / "group").write_text(GROUP_TEMPLATE.format(gid=gid))
        self.grading.mkdir(mode=0o700, exist_ok=True)
        if self.owner is not None:
            os.chown(self.grading, *self.owner)
        if python is None:
            raise BackendUnavailable("gvisor backend needs a Python the sandbox sees (python3)")
        limits = config.limits
        self._drop = command_start_argv(
            python,
            uid,
            gid,
            [
                ("RLIMIT_CPU", limits.cpu_seconds),
                ("RLIMIT_AS", limits.memory_bytes),
                ("RLIMIT_NPROC", limits.processes),
                ("RLIMIT_FSIZE", limits.file_size_bytes),
                ("RLIMIT_NOFILE", limits.open_files),
            ],
        )
        self._unshare = str(tools["unshare"])
        # The container's memory in total: runsc runs with --ignore-cgroups, so the host
        # puts it in the sandbox's cgroup itself (`_runsc(in_cgroup=True)`). gVisor's
        # processes are the Sentry's threads to the host kernel, so the cgroup counts no
        # pids (RLIMIT_NPROC inside bounds the sandbox's processes); its memory is the
        # sandbox's total plus what the Sentry and the gofer need themselves.
        self.cgroup = SandboxCgroup.create(
            config.limits.sandbox_memory_bytes + SENTRY_OVERHEAD_BYTES, UNCOUNTED_PIDS
        )
        self._write_bundle()
        try:
            self._start(memory_image)
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()
            raise

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
                "options": [
                    "nosuid",
                    "nodev",
                    "mode=1777",
                    f"size={self.config.limits.tmp_bytes}",
                ],
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
        for name in ("passwd", "group"):
            mounts.append(
                {
                    "destination": f"/etc/{name}",
                    "type": "bind",
                    "source": str(self.state_dir / name),
                    "options": ["rbind", "ro"],
                }
            )
        mounts.append(
            {
                "destination": SANDBOX_ROOT,
                "type": "bind",
                "source": str(self.workspace),
                "options": ["rbind", "rw", "nosuid", "nodev"],
            }
        )
        mounts.append(
            {
                "destination": GRADING_DIR,
                "type": "bind",
                "source": str(self.grading),
                "options": ["rbind", "rw", "nosuid", "nodev"],
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
                "args": _INIT_ARGV,
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

    def _runsc(
        self, *args: str, timeout: float = 120, in_cgroup: bool = False
    ) -> subprocess.CompletedProcess[bytes]:
        """One runsc lifecycle command. Its output goes to a file, not a pipe: a detached
        sandbox keeps the descriptors it was started with, and a pipe would never close.
        `in_cgroup`: started inside the sandbox's cgroup, so the sandbox process (the
        Sentry, whose memory is all of the container's) and the gofer it forks are in it."""
        log = self.state_dir / "runsc.log"
        argv = [self.binary, *self.flags, *args]
        if in_cgroup and self.cgroup is not None:
            argv = [*self.cgroup.enter_argv(), *argv]
        with log.open("ab") as sink:
            offset = sink.tell()
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
            completed: subprocess.CompletedProcess[bytes] = subprocess.CompletedProcess(
                argv, wait_exited(process, timeout)
            )
        with log.open("rb") as source:
            source.seek(offset)
            completed.stderr = source.read()
        return completed

    def _checked(self, *args: str, in_cgroup: bool = False) -> None:
        result = self._runsc(*args, in_cgroup=in_cgroup)
        if result.returncode != 0:
            raise RuntimeError(
                f"runsc {args[0]} failed ({result.returncode}): "
                f"{result.stderr.decode(errors='replace').strip()[-2000:]}"
            )

    def _start(self, memory_image: Path | None) -> None:
        if memory_image is None:
            self._checked(
                "run", "--detach", f"--bundle={self.bundle}", self.container, in_cgroup=True
            )
        else:
            self._checked(
                "restore",
                "--detach",
                f"--image-path={memory_image}",
                f"--bundle={self.bundle}",
                self.container,
                in_cgroup=True,
            )
        self.running = True
        self._oom_kills = self.cgroup.oom_kills() if self.cgroup is not None else None

    def _died(self) -> bool:
        """The cgroup's OOM killer ended a process of the container since it started (the
        sandbox as a whole ran out of memory): the Sentry, the gofer or the host process
        that holds an application's address space, after which the container does not
        run on. Where the kernel counts no OOM kills, every process of the cgroup being
        gone stands for it. A container killed from outside with the counter unchanged is
        not revived: its commands fail, as they did before the memory cap."""
        if not self.running or self.cgroup is None:
            return False
        kills = self.cgroup.oom_kills()
        if kills is not None and self._oom_kills is not None:
            return kills > self._oom_kills
        return not self.cgroup.pids()

    def _revive(self) -> bool:
        """Start a fresh container over the same workspace if the last one died (what was
        running, background processes included, is lost; the files are the host's)."""
        if not self._died():
            return False
        self._destroy()
        if self.cgroup is not None:
            self.cgroup.kill_all()  # what the container left (its gofer, address spaces)
        self.keep = []
        self._start(None)
        return True

    def _destroy(self) -> None:
        self._runsc("kill", self.container, "KILL", timeout=30)
        self._runsc("delete", "--force", self.container, timeout=30)
        self.running = False

    # -- commands ------------------------------------------------------------------

    def _exec_argv(self, *command: str, extra: tuple[str, ...] = ()) -> list[str]:
        env = [f"--env={k}={v}" for k, v in self.env.items()]
        return [
            self.binary,
            *self.flags,
            "exec",
            f"--cwd={SANDBOX_ROOT}",
            *extra,
            *env,
            self.container,
            *command,
        ]

    def _kill_pid(self, pid: int) -> None:
        self._runsc("kill", f"--pid={pid}", self.container, "KILL", timeout=30)

    def run(self, command: str, *, timeout: float) -> CommandResult:
        revived = self._revive()
        result = self._run(command, timeout=timeout)
        notes = []
        if revived:
            notes.append(
                "[the sandbox had run out of memory and was started afresh: processes "
                "that were running are gone, the files are kept]"
            )
        if self._died():
            notes.append(
                "[the sandbox ran out of memory (sandbox_memory_bytes in total) and was "
                "stopped; the next command starts it afresh]"
            )
        if not notes:
            return result
        before = f"{notes[0]}\n" if revived else ""
        after = f"\n{notes[-1]}" if self._died() else ""
        text = before + result.output + after
        update: dict[str, object] = {"output": text}
        if self._died() and result.exit_code == 0:
            update["exit_code"] = 137  # killed with the sandbox (SIGKILL)
        return result.model_copy(update=update)

    def _run(self, command: str, *, timeout: float) -> CommandResult:
        pid_file = self.state_dir / f"exec-{uuid.uuid4().hex[:12]}.pid"
        argv = self._exec_argv(
            self._unshare,
            "--pid",
            "--fork",
            "--kill-child",
            "--",
            *self._drop,
            "/bin/sh",
            "-c",
            command,
            extra=(*_COMMAND_CAPS, f"--internal-pid-file={pid_file}"),
        )
        try:
            result = run_capped(
                argv,
                env={"PATH": "/usr/bin:/bin"},
                timeout=timeout,
                output_limit=self.config.output_limit,
                output_kill_limit=self.config.output_kill_limit,
            )
            if result.timed_out or result.killed_for_output:
                # Killing `runsc exec` on the host leaves the command running inside:
                # kill the namespace's creator, whose death (--kill-child) ends the
                # namespace's init and so every process in it.
                try:
                    pid = int(pid_file.read_text().strip())
                except (OSError, ValueError):
                    self.kill_all()  # it never got a pid: take no chances
                else:
                    self._kill_pid(pid)
            return result
        finally:
            pid_file.unlink(missing_ok=True)

    def kill_all(self) -> None:
        """kill(-1) from inside until nothing but init is left (background processes too)."""
        self._revive()
        for _ in range(KILL_ATTEMPTS):
            # While a fork bomb fills the process table `runsc exec` itself can fail.
            result = subprocess.run(
                self._exec_argv("/bin/sh", "-c", _KILL_ALL, extra=("--cap=CAP_KILL",)),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
            if result.returncode == 0:
                self.keep = []
                return
            time.sleep(0.2)
        raise RuntimeError(
            "could not kill the gVisor sandbox's processes: "
            f"{result.stderr.decode(errors='replace')[-500:]}"
        )

    def grade(self, run: GradingRun, *, timeout: float) -> tuple[CommandResult, bytes | None]:
        """Run the grader's runner with its nonce and report in a fresh, randomly named
        directory.

        The caller has run `kill_all`, so the test command's own processes are the only
        ones in the sandbox while the directory exists; the runner is the init of the
        command's pid namespace (`exec`), kills the rest of it before it writes, and all
        are gone (the namespace ended) before the report is read. The directory is made by
        the host after the kill, under /composer-grading (a host directory bound into the
        container, which the host empties first), so nothing planted earlier is read.
        """
        self._empty_grading()
        name = secrets.token_hex(16)
        report_dir = self.grading / name
        report_dir.mkdir(mode=0o700)
        if self.owner is not None:
            os.chown(report_dir, *self.owner)
        try:
            run.write_nonce(report_dir, self.owner)
            result = self.run(
                run.shell_command(SANDBOX_ROOT, f"{GRADING_DIR}/{name}", own_pid_namespace=True),
                timeout=timeout,
            )
            return result, read_report(report_dir / REPORT_NAME)
        finally:
            self._empty_grading()

    def _empty_grading(self) -> None:
        # The bound directory itself must stay (the container's mount points at it).
        for entry in list(self.grading.iterdir()):
            remove_tree(entry)

    def start_background(self, command: str) -> None:
        # nohup execs setsid, which (not being a group leader) makes a session with the
        # same pid; $! is that pid. It lives in the container's own pid namespace, so
        # the commands' namespaces do not end it; `kill_all` does.
        launcher = f"nohup setsid /bin/sh -c {_quote(command)} >/dev/null 2>&1 </dev/null & echo $!"
        result = subprocess.run(
            self._exec_argv(*self._drop, "/bin/sh", "-c", launcher, extra=_COMMAND_CAPS),
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
        (image_dir / "owner.json").write_text(json.dumps(self.owner))
        return True

    def resume(self, image_dir: Path) -> None:
        self._start(image_dir)

    def close(self) -> None:
        with suppress(Exception):
            self._destroy()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
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
