"""Running one sandboxed command: a deadline, an output cap, and nothing left behind.

Every backend turns a command into an argv (bwrap ... sh -c, runsc exec ..., or a
plain sh -c) and hands it here. The child gets its own session, so on a timeout or
an output flood the whole process group is killed with SIGKILL; a SIGTERM handler
cannot delay it. What outlives the group (a daemon that called setsid) is the
backend's business: bwrap and gVisor end the command's pid namespace, the process
backend empties the sandbox's cgroup (where it has one). Once the command's own
process has exited, `run` returns within `EXIT_GRACE` even if something it left
still holds the output open.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

from composer_infra.sandbox.results import CommandResult

EXIT_GRACE = 0.2
"""Seconds output may stay open after the command's own process has exited."""


def _kill_group(process: subprocess.Popen[bytes], wait: float = 2.0) -> None:
    """SIGKILL the command's process group and wait (briefly) until it is gone."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(ProcessLookupError):
        process.kill()
    process.wait()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.005)


def run_capped(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    timeout: float,
    output_limit: int,
    output_kill_limit: int,
    after_exit: Callable[[], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> CommandResult:
    """Run `argv`, keep the first `output_limit` bytes of its output, never wait past `timeout`.

    Output past `output_kill_limit` bytes kills the command (a 10 GB `yes` would
    otherwise keep the host busy until the deadline). `after_exit` runs once the
    command is over, however it ended (the backend's kill of leftover processes).
    """
    start = time.monotonic()
    deadline = start + timeout
    read_fd, write_fd = os.pipe()
    # stderr is the same pipe as stdout, but through an open file description of its
    # own (a reopen of /proc/self/fd, not a dup). gVisor marks the host descriptor it
    # imports non-blocking, and copies the flags of the second one it imports from the
    # first when they share a description: the command's writes to a full pipe then
    # failed with EAGAIN ("tr: write error: Resource temporarily unavailable") instead
    # of waiting, and a command ended early under load.
    error_fd = os.open(f"/proc/self/fd/{write_fd}", os.O_WRONLY | os.O_CLOEXEC)
    try:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=error_fd,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
        os.close(error_fd)
    process.stdout = os.fdopen(read_fd, "rb", buffering=0)  # type: ignore[assignment]
    assert process.stdout is not None
    kept = bytearray()
    total = 0
    timed_out = killed_for_output = False
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not selector.select(timeout=min(remaining, 0.1)):
                # The command itself is over but something it started (a daemon) still
                # holds its output open: return now rather than at the deadline; the
                # group kill and `after_exit` below end the holder.
                if process.poll() is not None:
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > EXIT_GRACE:
                        break
                continue
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            total += len(chunk)
            if len(kept) < output_limit:
                kept += chunk[: output_limit - len(kept)]
            if total > output_kill_limit:
                killed_for_output = True
                break
    if timed_out or killed_for_output:
        _kill_group(process)
    else:
        # Output closed: the command is done or about to be; stragglers in its group go.
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(process)
    exit_code = process.wait()
    process.stdout.close()
    if after_exit is not None:
        after_exit()
    text = kept.decode("utf-8", errors="replace")
    if total > len(kept):
        text += f"\n[output truncated: {total} bytes, showing the first {len(kept)}]"
    if timed_out:
        text += f"\n[command timed out after {timeout:g}s and was killed]"
    if killed_for_output:
        text += f"\n[command killed: more than {output_kill_limit} bytes of output]"
    return CommandResult(
        exit_code=None if (timed_out or killed_for_output) else exit_code,
        output=text,
        timed_out=timed_out,
        truncated=total > len(kept),
        output_bytes=total,
        killed_for_output=killed_for_output,
        duration_s=time.monotonic() - start,
    )
