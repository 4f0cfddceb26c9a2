"""The host end of the bwrap exec channel: one bwrap per sandbox, commands sent into it.

One `bwrap` per command cost 12-22x a plain `subprocess.run` (namespaces, some thirty
mounts, prlimit and setpriv execs, every time). `ExecChannel` starts bwrap once, with
the same namespaces and mounts, around a small supervisor (`_channel_supervisor.py`)
and sends each command to it over a unix socket; the supervisor gives the command a
pid and mount namespace of its own, fresh /proc and /tmp, rlimits and the sandbox
uid (see its docstring), so the per-command guarantees stay what they were:

- the command's output comes through a pipe the host made (SCM_RIGHTS), read here
  with the same caps as `execution.run_capped`: `output_limit` kept, killed past
  `output_kill_limit`;
- the deadline is the host's: past it (or past the output cap) the host asks the
  supervisor to SIGKILL the command's namespace init, which ends every process of the
  command; the reply only comes once that namespace is gone;
- `run` returns once the command's init reports that it killed and reaped every other
  process of its namespace (`emptied`), or, without that report, once init has exited
  (a pidfd), by which the kernel has emptied the namespace;
- when the host side closes the channel (or dies: the control socket closes with it),
  the supervisor kills every command and exits, and bwrap with it; `close` makes sure
  with SIGKILL to bwrap's init (and the sandbox cgroup) if it does not.

Nothing lives between commands, so a channel that broke (its supervisor killed by the
cgroup's OOM killer, say) is simply started again for the next command.
"""

from __future__ import annotations

import array
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from composer_infra.sandbox.results import CommandResult

CREDENTIALS = struct.Struct("iII")
"""struct ucred: pid, uid, gid."""
SUPERVISOR_SOURCE = (Path(__file__).with_name("_channel_supervisor.py")).read_text()
REPLY_WAIT = 10.0
"""Seconds to wait for the supervisor's reply after asking it to kill a command."""
CLOSE_WAIT = 5.0
"""Seconds `close` waits for bwrap to end on its own before killing it."""


class ChannelBroken(RuntimeError):
    """The supervisor went away before answering (the channel is restarted next time)."""


class ExecChannel:
    """A long-lived bwrap sandbox and the socket that runs commands in it.

    `argv` is the full command line (cgroup entry, bwrap and its options, then the
    guest Python) up to the supervisor's source; `config` is the supervisor's
    configuration (see `_channel_supervisor.py`) without the control descriptor.
    """

    def __init__(self, argv: list[str], config: dict[str, Any], log_path: Path) -> None:
        self._argv = argv
        self._config = config
        self._log_path = log_path
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._info_read: int | None = None
        self._init_pid: int | None = None
        self.last_trace: dict[str, float] = {}
        """CLOCK_MONOTONIC times of the last command's steps, for the benchmark's
        breakdown: start, sent (host), received (supervisor), started, ended (the
        command's init), replied (init gone), done (host)."""

    # -- lifetime -----------------------------------------------------------------------

    def start(self) -> None:
        """Start bwrap and the supervisor; returns without waiting for them to be ready.

        Requests queue in the socket until the supervisor reads them, so the first
        command waits for the startup, not `create`.
        """
        with self._lock:
            if self._process is None:
                self._start_locked()

    def _start_locked(self) -> None:
        host, guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_read, info_write = os.pipe()
        config = {**self._config, "control_fd": guest.fileno()}
        bwrap_at = next(i for i, arg in enumerate(self._argv) if arg.endswith("bwrap"))
        argv = [
            *self._argv[: bwrap_at + 1],
            "--info-fd",
            str(info_write),
            *self._argv[bwrap_at + 1 :],
            SUPERVISOR_SOURCE,
            json.dumps(config),
        ]
        try:
            with open(self._log_path, "ab") as log:
                self._process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env={"PATH": "/usr/bin:/bin"},
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(guest.fileno(), info_write),
                )
        except BaseException:
            host.close()
            os.close(info_read)
            raise
        finally:
            guest.close()
            os.close(info_write)
        self._control = host
        self._info_read = info_read
        self._init_pid = None

    def _bwrap_init_pid(self) -> int | None:
        """The host pid of bwrap's init (from `--info-fd`); killing it ends the sandbox."""
        if self._init_pid is None and self._info_read is not None:
            with suppress(OSError, ValueError):
                ready, _, _ = select.select([self._info_read], [], [], 1.0)
                if ready:
                    text = os.read(self._info_read, 4096)
                    self._init_pid = int(json.loads(text or b"{}").get("child-pid", 0)) or None
        return self._init_pid

    def stop(self, *, force: bool = False) -> None:
        """End the sandbox: every process of every command is gone on return."""
        with self._lock:
            self._stop_locked(force=force)

    def _stop_locked(self, *, force: bool) -> None:
        process, control = self._process, self._control
        if process is None:
            return
        init = self._bwrap_init_pid() if force or process.poll() is None else None
        if control is not None:
            control.close()  # the supervisor kills its commands and exits
        if force and init:
            with suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
        try:
            process.wait(timeout=CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            if init:
                with suppress(ProcessLookupError):
                    os.kill(init, signal.SIGKILL)
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if self._info_read is not None:
            os.close(self._info_read)
        self._process = self._control = None
        self._info_read = self._init_pid = None

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return self._log_path.read_bytes()[-limit:].decode("utf-8", errors="replace")
        except OSError:
            return ""

    # -- commands -----------------------------------------------------------------------

    def _send(self, command: str, out_write: int, theirs: socket.socket) -> None:
        """Hand a request to the supervisor, restarting a channel that has ended."""
        message = [json.dumps({"command": command}).encode()]
        fds = [
            (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out_write, theirs.fileno()]))
        ]
        for attempt in range(2):
            with self._lock:
                if self._process is not None and self._process.poll() is not None:
                    self._stop_locked(force=True)
                if self._process is None:
                    self._start_locked()
                control = self._control
            assert control is not None
            try:
                control.sendmsg(message, fds)
                return
            except OSError:
                if attempt:
                    raise
                with self._lock:
                    if self._control is control:
                        self._stop_locked(force=True)

    def run(
        self, command: str, *, timeout: float, output_limit: int, output_kill_limit: int
    ) -> CommandResult:
        """Run `command` in the sandbox; the same contract as `execution.run_capped`."""
        start = time.monotonic()
        deadline = start + timeout
        out_read, out_write = os.pipe()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The command's init writes its status here before it exits; the credentials
        # the kernel attaches give its pid in our namespace (see `_on_reply`).
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        trace = {"start": start}
        try:
            self._send(command, out_write, theirs)
            trace["sent"] = time.monotonic()
        except BaseException:
            os.close(out_read)
            mine.close()
            raise
        finally:
            os.close(out_write)
            theirs.close()
        kept = bytearray()
        total = 0
        timed_out = killed_for_output = False
        reply: dict[str, Any] | None = None  # set once the command's namespace is gone
        init_status: dict[str, Any] | None = None
        pidfd: int | None = None
        output_open = True
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(out_read, selectors.EVENT_READ, "out")
                selector.register(mine, selectors.EVENT_READ, "reply")
                while output_open or reply is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        timed_out = True
                        break
                    for key, _ in selector.select(timeout=remaining):
                        if key.data == "pidfd":
                            # init has exited: the kernel emptied its namespace first.
                            with suppress(KeyError):
                                selector.unregister(key.fileobj)
                            if reply is None:
                                reply = init_status
                                trace["replied"] = time.monotonic()
                            continue
                        if key.data == "reply":
                            message, pid = self._read_message(mine)
                            if "init_exit_code" in message and pidfd is None:
                                init_status = {
                                    "exit_code": message["init_exit_code"],
                                    "trace": message.get("trace", {}),
                                }
                                # `emptied`: init killed and reaped every other process
                                # of its namespace; otherwise wait for init's exit.
                                pidfd = None if message.get("emptied") else _pidfd(pid)
                                if pidfd is None:  # emptied, or init already gone
                                    reply = init_status
                                    trace["replied"] = time.monotonic()
                                    selector.unregister(mine)
                                else:
                                    selector.register(pidfd, selectors.EVENT_READ, "pidfd")
                            elif "init_exit_code" not in message and reply is None:
                                reply = message  # the supervisor reaped init
                                trace["replied"] = time.monotonic()
                                selector.unregister(mine)
                                if pidfd is not None:
                                    with suppress(KeyError):
                                        selector.unregister(pidfd)
                            continue
                        chunk = os.read(out_read, 1 << 16)
                        if not chunk:
                            output_open = False
                            selector.unregister(out_read)
                            continue
                        total += len(chunk)
                        if len(kept) < output_limit:
                            kept += chunk[: output_limit - len(kept)]
                        if total > output_kill_limit:
                            killed_for_output = True
                    if killed_for_output:
                        break
            if reply is None:
                with suppress(OSError):
                    mine.shutdown(socket.SHUT_WR)  # the supervisor kills the command
                mine.settimeout(REPLY_WAIT)
                try:
                    while reply is None:  # its reply comes once the namespace is reaped
                        message, _ = self._read_message(mine)
                        if "init_exit_code" not in message:
                            reply = message
                except (TimeoutError, ChannelBroken):
                    reply = {"error": "no reply"}
                    self.stop(force=True)
        except ChannelBroken:
            self.stop(force=True)  # whatever is left of the sandbox goes with it
            reply = {"error": f"sandbox supervisor ended unexpectedly\n{self.log_tail()}"}
        finally:
            os.close(out_read)
            mine.close()
            if pidfd is not None:
                os.close(pidfd)
        text = kept.decode("utf-8", errors="replace")
        if total > len(kept):
            text += f"\n[output truncated: {total} bytes, showing the first {len(kept)}]"
        if timed_out:
            text += f"\n[command timed out after {timeout:g}s and was killed]"
        if killed_for_output:
            text += f"\n[command killed: more than {output_kill_limit} bytes of output]"
        exit_code = reply.get("exit_code")
        if "error" in reply and not (timed_out or killed_for_output):
            text += f"\n[sandbox: the command could not run: {reply['error']}]"
            exit_code = None
        trace.update(reply.get("trace") or {})
        self.last_trace = {**trace, "done": time.monotonic()}
        return CommandResult(
            exit_code=None if (timed_out or killed_for_output) else exit_code,
            output=text,
            timed_out=timed_out,
            truncated=total > len(kept),
            output_bytes=total,
            killed_for_output=killed_for_output,
            duration_s=time.monotonic() - start,
        )

    @staticmethod
    def _read_message(sock: socket.socket) -> tuple[dict[str, Any], int]:
        """One message on a command's socket and the sender's pid (in our namespace)."""
        try:
            data, ancillary, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(CREDENTIALS.size))
        except TimeoutError:
            raise
        except OSError as error:
            raise ChannelBroken(f"the command's socket failed: {error}") from error
        if not data:
            raise ChannelBroken("the supervisor closed the command's socket without a reply")
        pid = 0
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = CREDENTIALS.unpack(payload[: CREDENTIALS.size])[0]
        message: dict[str, Any] = json.loads(data)
        return message, pid


def _pidfd(pid: int) -> int | None:
    """A pidfd of `pid`, or None when it is gone (its namespace is gone with it)."""
    if pid <= 0:
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
