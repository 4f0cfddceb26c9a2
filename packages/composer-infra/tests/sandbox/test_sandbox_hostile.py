"""Hostile episodes, run against every backend present.

Each test plays a model trying to get out of, or take down, its sandbox, and checks
that the host, the run and other sandboxes are untouched. The `process` backend
isolates nothing; the tests it cannot pass are marked (xfail with the reason), which
is the containment table of docs/infra/containment.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from composer_infra.sandbox import Sandbox
from composer_infra.sandbox.cgroups import cgroup_unavailable

MakeSandbox = Callable[..., Sandbox]


def not_contained_by_process(request: pytest.FixtureRequest, backend: str, why: str) -> None:
    if backend == "process":
        request.applymarker(pytest.mark.xfail(reason=f"process backend: {why}", strict=True))


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds `marker` (escaped sandbox processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if pid != os.getpid()]


def kill_escaped(marker: str) -> None:
    for pid in host_processes_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


SANDBOX_PS = "grep -l {marker} /proc/[0-9]*/cmdline 2>/dev/null | grep -v self || true"


# -- network ----------------------------------------------------------------------------


def test_no_interface_but_loopback(backend: str, make_sandbox: MakeSandbox, request) -> None:
    """A sandbox's network namespace has `lo` and nothing else: no route to anywhere.

    This is how outward containment is checked without sending a packet off the host:
    no test dials a public or private address, even to show that it is blocked.
    """
    not_contained_by_process(request, backend, "shares the host network")
    sandbox = make_sandbox(backend)
    script = "import socket\nprint('IFACES', sorted(name for _, name in socket.if_nameindex()))\n"
    sandbox.write_file("probe.py", script)
    result = sandbox.run("python probe.py")
    assert result.ok, result.output
    assert "IFACES ['lo']" in result.output, result.output


def test_no_tcp_to_host_loopback_service(backend: str, make_sandbox: MakeSandbox, request) -> None:
    not_contained_by_process(request, backend, "shares the host's loopback")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        sandbox = make_sandbox(backend)
        script = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\n"
            "except OSError as e:\n    print('BLOCKED', e)\n"
        )
        sandbox.write_file("probe.py", script)
        result = sandbox.run("python probe.py")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert not accepted, "the host's loopback service accepted a connection from the sandbox"
    assert "CONNECTED" not in result.output


# -- reading ----------------------------------------------------------------------------


def test_cannot_read_host_home(backend: str, make_sandbox: MakeSandbox, request) -> None:
    not_contained_by_process(request, backend, "runs as the host user, with the host's files")
    secret = uuid.uuid4().hex
    canary = Path.home() / f".composer-canary-{secret[:8]}"
    canary.write_text(secret)
    try:
        sandbox = make_sandbox(backend)
        result = sandbox.run(f"cat {canary}")
        listing = sandbox.run(f"ls -a {Path.home()}")
        tool = sandbox.read_file(str(canary))
    finally:
        canary.unlink()
    assert not tool.ok
    assert secret not in result.output
    assert canary.name not in listing.output


def test_cannot_read_another_sandbox(backend: str, make_sandbox: MakeSandbox, request) -> None:
    not_contained_by_process(request, backend, "every workspace is on the host filesystem")
    secret = uuid.uuid4().hex
    victim = make_sandbox(backend)
    victim.write_file("secret.txt", secret)
    attacker = make_sandbox(backend)
    result = attacker.run(
        f"cat {victim.workspace}/secret.txt; cat ../*/workspace/secret.txt; "
        "cat /proc/*/root/workspace/secret.txt 2>&1 | head -c 2000"
    )
    assert secret not in result.output


def test_cannot_read_run_directory(backend: str, make_sandbox: MakeSandbox, request) -> None:
    not_contained_by_process(request, backend, "the run directory is readable on the host")
    sandbox = make_sandbox(backend)
    secret = uuid.uuid4().hex
    run_dir = sandbox.home.parent
    (run_dir / "run-secret.txt").write_text(secret)
    result = sandbox.run(f"cat {run_dir}/run-secret.txt; cat {sandbox.home}/../run-secret.txt")
    assert secret not in result.output


def test_environment_is_clean(
    backend: str, make_sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = "FAKE" + uuid.uuid4().hex
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", fake)
    sandbox = make_sandbox(backend)
    result = sandbox.run("env; cat /proc/1/environ /proc/self/environ 2>/dev/null | tr '\\0' '\\n'")
    assert fake not in result.output
    assert "AWS_SECRET_ACCESS_KEY" not in result.output


# -- writing ----------------------------------------------------------------------------


def test_cannot_write_outside(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path, request
) -> None:
    not_contained_by_process(request, backend, "can write wherever the host user can")
    target = tmp_path / "outside.txt"
    sandbox = make_sandbox(backend)
    # Each write on its own, so each one's failure is seen (not only the last command's).
    direct = sandbox.run(f"echo pwned > {target}")
    upward = sandbox.run(f"echo pwned > ../outside-{uuid.uuid4().hex[:6]}")
    assert not target.exists()
    assert not list(sandbox.home.parent.glob("outside-*"))
    for result in (direct, upward):
        assert result.data["exit_code"] not in (0, None), result.output
        assert any(
            why in result.output
            for why in ("No such file", "nonexistent", "Read-only", "Permission denied")
        ), result.output
    if backend != "process":  # the process backend (as root) really would write to /usr
        system = sandbox.run(f"echo pwned > /usr/composer-pwned-{uuid.uuid4().hex[:6]}")
        assert system.data["exit_code"] not in (0, None), system.output
        assert not list(Path("/usr").glob("composer-pwned-*"))


def test_file_tools_refuse_planted_symlinks(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    """The host-side tools: a symlink planted by a command cannot lead them out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    sandbox = make_sandbox(backend)
    planted = sandbox.run(f"ln -s {outside} dir_link && ln -s {outside}/secret.txt file_link")
    assert planted.ok, planted.output
    read = sandbox.read_file("file_link")
    assert not read.ok and "outside the workspace" in (read.error or "")
    write = sandbox.write_file("dir_link/new.txt", "pwned")
    assert not write.ok
    assert not (outside / "new.txt").exists()
    edit = sandbox.edit_file("file_link", "host", "pwned")
    assert not edit.ok
    assert (outside / "secret.txt").read_text() == "host secret"
    assert not sandbox.read_file("../../etc/passwd").ok
    assert not sandbox.list_files("dir_link").ok
    # A link that stays inside the workspace is followed.
    assert sandbox.run("ln -s calc.py alias.py").ok
    assert "def add" in sandbox.read_file("alias.py").output


def test_commands_cannot_follow_symlinks_out(
    backend: str, make_sandbox: MakeSandbox, tmp_path: Path, request
) -> None:
    not_contained_by_process(request, backend, "the host filesystem is the sandbox's")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret " + uuid.uuid4().hex)
    sandbox = make_sandbox(backend)
    result = sandbox.run(
        f"ln -s {outside} dir_link; cat dir_link/secret.txt; echo pwned > dir_link/new.txt"
    )
    assert "host secret" not in result.output
    assert not (outside / "new.txt").exists()


# -- resources --------------------------------------------------------------------------


@pytest.mark.slow  # about 10 s over the backends
def test_fork_bomb_is_bounded(backend: str, make_sandbox: MakeSandbox) -> None:
    if backend == "process" and cgroup_unavailable() is not None:
        pytest.skip(
            "process backend without a cgroup (whose pids.max would bound it): RLIMIT_NPROC "
            "does not bind root, and as a user it counts all of the user's processes; a fork "
            f"bomb would harm the host, so it is not run ({cgroup_unavailable()})"
        )
    sandbox = make_sandbox(backend)
    result = sandbox.run("bomb() { bomb | bomb & }; bomb; sleep 3", timeout=8)
    # The process limit was hit (the shell says it cannot fork), and the host lived to
    # read the result; the bomb's processes are gone with the command.
    assert "fork" in result.output.lower(), result.output
    # The sandbox recovers: on a loaded host gVisor can need a moment to reap the bomb's
    # last processes before `runsc exec` may start another one.
    deadline = time.monotonic() + 15
    after = sandbox.run("echo alive")
    while not after.ok and time.monotonic() < deadline:
        time.sleep(0.5)
        after = sandbox.run("echo alive")
    assert after.ok and "alive" in after.output
    assert sandbox.run("ps -e | wc -l").ok


def test_memory_hog_is_bounded(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    sandbox.write_file(
        "hog.py",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))\n",
    )
    result = sandbox.run("python hog.py")
    assert not result.data["timed_out"]
    # Stopped by the per-process address-space limit, as Python reports it.
    assert "MemoryError" in result.output, result.output
    assert result.data["exit_code"] == 1


def test_infinite_loop_is_killed(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    result = sandbox.run("while :; do :; done", timeout=2)
    assert not result.ok and result.data["timed_out"]
    assert sandbox.run("echo next").ok


def test_ten_gigabytes_of_output_is_capped(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    result = sandbox.run("head -c 10G /dev/zero | tr '\\0' x")
    # Killed at the cap, on every backend. (gVisor once ended the command early under
    # load: its stdout arrived non-blocking and `tr` got EAGAIN from a full pipe; see
    # test_output_descriptors_are_blocking in test_sandbox_integrity.py.)
    assert result.data["killed_for_output"], result
    assert result.data["exit_code"] is None
    assert len(result.output) < 16 * 1024
    assert result.data["output_bytes"] < 10 * 1024**3


def test_ten_gigabyte_file_is_capped(backend: str, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(backend)
    result = sandbox.run("head -c 10G /dev/zero > big.bin")
    assert result.data["exit_code"] not in (0, None), result.output  # SIGXFSZ or EFBIG
    assert (sandbox.workspace / "big.bin").stat().st_size == 16 * 1024**2  # RLIMIT_FSIZE


@pytest.mark.slow  # about 8 s over the backends; test_infinite_loop_is_killed stays quick
def test_sigterm_ignoring_process_is_killed(backend: str, make_sandbox: MakeSandbox) -> None:
    marker = f"composer-stubborn-{uuid.uuid4().hex[:8]}"
    sandbox = make_sandbox(backend)
    sandbox.write_file(
        "stubborn.py",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(1000)\n",
    )
    try:
        result = sandbox.run(f"cp stubborn.py {marker}.py; python {marker}.py", timeout=2)
        assert result.data["timed_out"]
        assert not host_processes_with(marker)
        inside = sandbox.run(SANDBOX_PS.format(marker=marker))
        assert marker not in inside.output.replace(f"grep -l {marker}", "")
    finally:
        kill_escaped(marker)


def test_daemon_does_not_outlive_its_command(
    backend: str, make_sandbox: MakeSandbox, request
) -> None:
    if cgroup_unavailable() is not None:
        not_contained_by_process(
            request, backend, "a setsid daemon leaves the process group (and no cgroup here)"
        )
    marker = f"composer-daemon-{uuid.uuid4().hex[:8]}"
    sandbox = make_sandbox(backend)
    sandbox.write_file(
        f"{marker}.py",
        "import os, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "for fd in (0, 1, 2): os.close(fd)\n"
        "time.sleep(1000)\n",
    )
    try:
        result = sandbox.run(f"python {marker}.py; echo started")
        assert "started" in result.output
        assert not host_processes_with(marker)
        inside = sandbox.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
        assert f"{marker}.py" not in inside.output
    finally:
        kill_escaped(marker)
