"""The bwrap exec channel: one bwrap per sandbox, and what that must not change.

The hostile and integrity suites run on `bwrap` (the channel) and `bwrap-per-command`
alike; these tests cover what only the channel has: a long-lived sandbox whose
commands still start clean, and what happens when its host side or its supervisor dies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from _sandbox_support import TEST_CONFIG, backend_unavailable

from composer_infra.sandbox import Sandbox
from composer_infra.sandbox.backends.bwrap import BwrapRuntime
from composer_infra.sandbox.mounts import unmount

pytestmark = [
    pytest.mark.skipif(backend_unavailable("bwrap") is not None, reason="bwrap is not available"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the channel runs when the host side is root"),
]

MakeSandbox = Callable[..., Sandbox]


def channel_of(sandbox: Sandbox) -> BwrapRuntime:
    runtime = sandbox.runtime
    assert isinstance(runtime, BwrapRuntime) and runtime.channel is not None
    return runtime


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], limit: float = 15.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_one_bwrap_serves_every_command(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap")
    runtime = channel_of(sandbox)
    first = sandbox.run("echo one")
    process = runtime.channel._process  # type: ignore[union-attr]
    assert first.ok and first.output == "one\n"
    for n in range(5):
        assert sandbox.run(f"echo {n}").output == f"{n}\n"
    assert runtime.channel._process is process and process is not None  # type: ignore[union-attr]
    assert process.poll() is None


def test_each_command_starts_clean(make_sandbox: MakeSandbox) -> None:
    """Fresh /tmp, own pid namespace (pid 2, nothing else of the sandbox visible), no caps,
    no descriptor of the supervisor's."""
    sandbox = make_sandbox("bwrap")
    assert sandbox.run("echo left > /tmp/note && sleep 60 &").ok
    probe = sandbox.run(
        "test -e /tmp/note && echo tmp-kept; echo pid=$$; ls /proc | grep -c '^[0-9]'; "
        "grep CapEff /proc/self/status; id -u; stat -c %a /tmp; ulimit -t"
    )
    assert probe.ok, probe.output
    lines = probe.output.split()
    assert "tmp-kept" not in lines
    assert "pid=2" in lines  # init is 1, the shell 2, as with one bwrap per command
    assert lines[lines.index("pid=2") + 1] in ("3", "4")  # init, sh, ls (and grep)
    assert "0000000000000000" in lines
    assert int(lines[-3]) == sandbox.runtime.owner[0]  # type: ignore[index]
    assert lines[-2] == "1777"
    assert lines[-1] == str(TEST_CONFIG.limits.cpu_seconds)
    # Only stdin, stdout and stderr reach the command (and `ls` its own directory fd).
    assert sandbox.run("ls /proc/self/fd").output.split() == ["0", "1", "2", "3"]


CLONE_SYSCALL = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)


@pytest.mark.skipif(CLONE_SYSCALL is None, reason="clone's syscall number for this machine")
def test_the_command_returns_only_after_everything_it_started_is_gone(
    make_sandbox: MakeSandbox,
) -> None:
    """The command's init kills and reaps every other process of its namespace before it
    answers, so `run` returns without waiting for init's own exit. What that must still
    catch: a child made by a raw clone with no exit signal (which a plain wait() never
    reports), a fork chain racing the kill, and a setsid daemon."""
    marker = f"composer-survivor-{uuid.uuid4().hex[:8]}"
    sandbox = make_sandbox("bwrap")
    runtime = channel_of(sandbox)
    sandbox.write_file(
        f"{marker}.py",
        textwrap.dedent(
            f"""
            import ctypes, os, time
            libc = ctypes.CDLL(None, use_errno=True)
            # clone(flags=0): a copy of this process whose exit signals nobody.
            if libc.syscall({CLONE_SYSCALL}, 0, None, None, None, None) == 0:
                time.sleep(1000)
            if os.fork() == 0:  # a chain that keeps forking while init kills
                while True:
                    if os.fork():
                        os._exit(0)
            if os.fork() == 0:
                os.setsid()
                time.sleep(1000)
            time.sleep(0.2)
            """
        ),
    )
    try:
        for _ in range(3):
            result = sandbox.run(f"python {marker}.py; echo started")
            assert "started" in result.output, result.output
            assert not host_processes_with(marker)
            assert "emptied" in runtime.channel.last_trace  # type: ignore[union-attr]
        # An ordinary command takes the same path (the host did not wait on init's exit).
        assert sandbox.run("true").ok
        assert "emptied" in runtime.channel.last_trace  # type: ignore[union-attr]
    finally:
        for pid in host_processes_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _waiting_inits(uid: int) -> list[int]:
    """The supervisor's forks that run as the sandbox uid and have no command yet."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()
        if int(uids[1]) == uid and b"bwrap exec channel" in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_waiting_inits_that_die_are_replaced(make_sandbox: MakeSandbox) -> None:
    """Two inits wait ready (a command right behind another need not wait for one to be
    made); killed while waiting (the cgroup's OOM killer, say), they are made again and
    the next command runs."""
    sandbox = make_sandbox("bwrap")
    runtime = channel_of(sandbox)
    assert sandbox.run("true").ok
    uid = runtime.owner[0]  # type: ignore[index]
    assert wait_until(lambda: len(_waiting_inits(uid)) == 2)
    killed = _waiting_inits(uid)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    # Dead, reaped or not: a command handed to an init in the instant between its
    # SIGKILL and its death dies with it, as any command killed under it would.
    assert wait_until(lambda: not any(alive(pid) for pid in killed))
    for n in range(3):
        result = sandbox.run(f"echo {n}")
        assert result.ok and result.output == f"{n}\n", result.output
    assert wait_until(lambda: len(_waiting_inits(uid)) == 2)


def test_concurrent_commands_keep_their_output(make_sandbox: MakeSandbox) -> None:
    runtime = channel_of(make_sandbox("bwrap"))
    results: dict[int, str] = {}

    def one(n: int) -> None:
        results[n] = runtime.run(f"sleep 0.{n % 3}; echo {n}", timeout=20).output

    threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: f"{n}\n" for n in range(6)}


def test_a_killed_supervisor_fails_the_command_and_the_next_one_runs(
    make_sandbox: MakeSandbox,
) -> None:
    marker = f"composer-orphan-{uuid.uuid4().hex[:8]}"
    sandbox = make_sandbox("bwrap")
    runtime = channel_of(sandbox)
    assert sandbox.run("true").ok
    supervisors = host_processes_with("_channel_supervisor") or host_processes_with(
        "Supervisor(config).serve()"
    )
    init = runtime.channel._bwrap_init_pid()  # type: ignore[union-attr]
    ours = [
        pid
        for pid in supervisors
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(init)
    ]
    assert len(ours) == 1, (supervisors, init)
    killer = threading.Timer(1.0, os.kill, (ours[0], signal.SIGKILL))
    killer.start()
    result = sandbox.run(f"sh -c 'sleep 30; :' {marker}", timeout=20)
    killer.join()
    assert not result.ok and "supervisor" in result.output, result
    assert result.data["duration_s"] < 15
    assert wait_until(lambda: not host_processes_with(marker)), "the command outlived its sandbox"
    again = sandbox.run("echo back")
    assert again.ok and again.output == "back\n"


def test_host_death_ends_the_sandbox(tmp_path: Path) -> None:
    """The host side killed with SIGKILL: its control socket closes, and every command's
    processes go (its command socket closes), and so do the supervisor and bwrap (the
    control socket closes). bwrap runs without --die-with-parent here, so that a sandbox
    started on a worker thread does not die with that thread."""
    marker = f"composer-host-death-{uuid.uuid4().hex[:8]}"
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from _sandbox_support import CALC_TASK, TEST_CONFIG
        from pathlib import Path
        from composer_infra.sandbox import Sandbox
        work = Path({str(tmp_path)!r})
        sandbox = Sandbox.create(CALC_TASK, "bwrap", config=TEST_CONFIG, work_dir=work)
        print(sandbox.runtime.channel._process.pid, flush=True)
        sandbox.run("sh -c 'sleep 300; :' {marker} & sh -c 'sleep 300; :' {marker}", timeout=300)
        """
    )
    host = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)

    def sandboxed() -> list[int]:  # the host's own command line holds the marker too
        return [pid for pid in host_processes_with(marker) if pid != host.pid]

    try:
        try:
            assert host.stdout is not None
            bwrap = int(host.stdout.readline())
            assert wait_until(lambda: len(sandboxed()) >= 2)  # the two, and their shell
        finally:
            host.kill()
            host.wait()
        assert wait_until(lambda: not sandboxed()), "sandbox processes outlived the host"
        assert wait_until(lambda: not alive(bwrap)), "the sandbox's bwrap outlived the host"
    finally:
        for workspace in tmp_path.glob("sbx-*/workspace"):
            unmount(workspace)  # the dead host could not


def test_channel_follows_a_replaced_workspace(make_sandbox: MakeSandbox) -> None:
    """The host swaps the workspace directory: commands see the new one, not the bound old one."""
    sandbox = make_sandbox("bwrap")
    assert sandbox.run("echo old > mark").ok
    unmount(sandbox.workspace)
    old = sandbox.workspace.with_name("workspace-old")
    sandbox.workspace.rename(old)
    sandbox.workspace.mkdir()
    (sandbox.workspace / "mark").write_text("new\n")
    os.chown(sandbox.workspace, *sandbox.runtime.owner)  # type: ignore[misc]
    result = sandbox.run("cat mark")
    assert result.ok and result.output == "new\n", result


def test_toolchain_under_tmp_survives_each_fresh_tmp(make_sandbox: MakeSandbox) -> None:
    root = Path("/tmp") / f"composer-toolchain-{uuid.uuid4().hex[:8]}"
    (root / "bin").mkdir(parents=True)
    tool = root / "bin" / "composer-hello"
    tool.write_text("#!/bin/sh\necho hello from the toolchain\n")
    tool.chmod(0o755)
    root.chmod(0o755)
    try:
        config = TEST_CONFIG.model_copy(
            update={"toolchain_paths": (*TEST_CONFIG.toolchain_paths, root)}
        )
        sandbox = make_sandbox("bwrap", config=config)
        for _ in range(2):
            result = sandbox.run("composer-hello && touch /tmp/x")
            assert result.ok and result.output == "hello from the toolchain\n", result
        assert not sandbox.run(f"touch {root}/written").ok  # read-only, as before
    finally:
        tool.unlink()
        (root / "bin").rmdir()
        root.rmdir()


def test_per_command_path_stays_selectable(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap-per-command")
    runtime = sandbox.runtime
    assert isinstance(runtime, BwrapRuntime) and runtime.channel is None
    assert sandbox.run("echo hi").output == "hi\n"
