"""The in-sandbox end of the bwrap exec channel: one supervisor per sandbox.

This file is not imported by the host: its source is handed to the sandbox's Python
(`python -I -S -c <source> <config json>`) as the one long-lived process of a bwrap
sandbox. It is stdlib only and runs as root inside bwrap's namespaces (root on the
host side means real root with capabilities inside the mount, pid, net, ipc and uts
namespaces bwrap made), so it can give each command what one bwrap per command gave:

- a pid namespace of its own, whose init (a fork of this process) starts the command
  as pid 2: when the command's shell exits, init kills and reaps every process left
  in the namespace (daemons that called setsid, clone children with no exit signal)
  and checks its /proc is empty before it answers, so "every process the command
  started is gone on return" holds as before; should that check fail, init just
  exits and the host waits for that exit, by which the kernel has emptied the
  namespace;
- a mount namespace of its own with a fresh /proc (the command sees only its own
  processes, not the supervisor) and a fresh size-limited /tmp (nothing a command
  leaves in /tmp reaches the next one, as with one bwrap per command);
- its own session, stdin from /dev/null, stdout and stderr the host's pipe (received
  with SCM_RIGHTS), rlimits, the sandbox uid with no capabilities (bounding set
  emptied), no supplementary groups and no-new-privs, then `/bin/sh -c command`.

What makes it cheap: the next command's init is made ahead (fork, namespaces,
mounts, limits, uid) and waits for its command; a request is then one socket message
to it and a `posix_spawn` of the shell. Two wait. A replacement is made once the
previous command is over, or 5 ms into it (`PREPARE_DELAY`), not while a short command
runs (unless none is left): on two cores its fork and mounts took a third of a short
command's time. Init answers the host itself before its own exit, whose teardown of
this forked interpreter's address space is half a millisecond nobody needs to wait
for. A command's mount namespace is held open by the supervisor until its
reply is sent and then dropped by a helper process (`release`), so the unmounts and
their RCU grace period are paid by nobody who waits.

Protocol (unix SOCK_SEQPACKET, the control socket passed in by fd number): a request
is one message, JSON `{"command": str}` with two descriptors, the write end of the
output pipe and one end of a fresh per-command socket pair. The reply is one message
on that per-command socket, JSON `{"exit_code": int | null, "trace": {...}}` or
`{"error": str}`, sent after the command's namespace is gone (the command's init sends
`{"init_exit_code": int, "emptied": true, "trace": {...}}` on it first, once it has
killed and reaped everything else of its namespace); the trace holds
CLOCK_MONOTONIC times (request received, handed to the waiting init, init reaped) the host uses to say where a command's time goes. Anything the
host sends on the per-command socket, or its closing, kills the command's namespace
(timeouts and output caps are the host's). The control socket closing (the host closed
the sandbox or died) kills every running command and ends the supervisor, and with it
bwrap.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
READY_INITS = 2  # waiting inits: a command right behind another need not wait for one
PREPARE_DELAY = 0.005  # seconds into a running command before the next init is made
WAIT_ALL = 0x40000000  # __WALL: wait for every kind of child (clone children included)
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
# bwrap makes these read-only in the /proc it mounts; the fresh /proc gets the same.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_privileges(uid: int, gid: int, last_cap: int) -> None:
    """What `setpriv --reuid --regid --clear-groups --inh-caps=-all --bounding-set=-all
    --no-new-privs` does, without an exec."""
    for cap in range(last_cap + 1):
        _check(_prctl(PR_CAPBSET_DROP, cap), "drop bounding capability")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # clears the permitted and effective sets
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: no effective, permitted or inheritable capability
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_seccomp(program_hex: str) -> None:
    """The host's seccomp filter (`_seccomp.py`: no user namespaces), after no_new_privs."""
    if not program_hex:
        return
    program = bytes.fromhex(program_hex)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    result = _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)
    _check(result, "seccomp")


def _reset_signals() -> None:
    """Undo what Python and the supervisor set up (pid 1 ignores signals left at default)."""
    signal.set_wakeup_fd(-1)
    for number in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _fresh_mounts(config: dict) -> None:
    """A /proc of the command's own pid namespace and a fresh /tmp, in its mount namespace."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    for name in PROC_READ_ONLY:
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC, None)
            _mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={config['tmp_bytes']},mode=1777")
    # Toolchains that live under /tmp (a virtualenv in a checkout there) come back from
    # where bwrap also bound them, so the fresh /tmp does not hide them.
    for staged, target in config["tmp_toolchains"]:
        os.makedirs(target, mode=0o755, exist_ok=True)
        parent = target
        while parent.startswith("/tmp/"):
            os.chmod(parent, 0o755)
            parent = os.path.dirname(parent)
        _mount(staged, target, None, MS_BIND | MS_REC, None)
        _mount(target, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)


def _init(config: dict, link: socket.socket) -> None:
    """Pid 1 of a command's namespace, made before the command is known.

    It sets up everything that does not depend on the command (fresh /proc and /tmp,
    rlimits, the sandbox uid without capabilities), then waits on `link` for the
    command and its output descriptor, spawns `/bin/sh -c command` (posix_spawn: no
    second Python fork), reaps whatever gets orphaned and exits with the shell's
    status, after killing and reaping what the command left (`_empty_namespace`).
    RLIMIT_NPROC counts the inits too (they run as the sandbox uid: this one and the
    `READY_INITS` waiting), so it is that much higher.
    """
    code = 126
    try:
        os.closerange(3, link.fileno())
        os.closerange(link.fileno() + 1, 1 << 16)
        _reset_signals()
        _fresh_mounts(config)
        os.chdir(config["cwd"])
        for name, value in config["rlimits"]:
            extra = 1 + READY_INITS if name == "RLIMIT_NPROC" else 0
            resource.setrlimit(getattr(resource, name), (value + extra, value + extra))
        _drop_privileges(config["uid"], config["gid"], config["last_cap"])
        _install_seccomp(config.get("seccomp", ""))
        # Die with the supervisor (bwrap's own init outlives it while any process is
        # left, so nothing else would end a running command). After the uid change,
        # which clears the setting; had the supervisor died before this line, the
        # recv below sees its end closed and we leave.
        _check(_prctl(PR_SET_PDEATHSIG, signal.SIGKILL), "pdeathsig")
        message, fds, _, _ = socket.recv_fds(link, 1 << 20, 2)
        if not message or len(fds) != 2:
            os._exit(0)  # the supervisor is shutting down
        out_fd, reply_fd = fds
        for fd in fds:
            os.set_inheritable(fd, False)  # the shell gets the output as 1 and 2 only
        reply = socket.socket(fileno=reply_fd)
        request = json.loads(message)
        command = request["command"]
        trace = {"received": request.get("received", 0.0), "started": time.monotonic()}
    except BaseException as error:  # reported when the command arrives
        _report_failure(link, error)
        os._exit(code)
    try:
        child = os.posix_spawn(
            config["shell"],
            [config["shell"], "-c", command],
            config["env"],
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, out_fd, 2),
            ],
            setsid=True,
            setsigmask=[],
            setsigdef=[signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD],
        )
    except BaseException as error:  # EAGAIN under RLIMIT_NPROC, say
        os.write(out_fd, f"sandbox: could not start the command: {error}\n".encode())
        os._exit(code)
    trace["spawned"] = time.monotonic()
    os.close(out_fd)
    while True:
        pid, status = os.waitpid(-1, WAIT_ALL)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            break
    trace["ended"] = time.monotonic()
    emptied = _empty_namespace()
    trace["emptied"] = time.monotonic()
    # Straight to the host, which learns our pid from the message's credentials. With
    # `emptied` every other process of the namespace is dead and reaped, so the host
    # returns now and our own exit (tearing down this forked interpreter's address space,
    # half a millisecond) is off its path. Without it the host waits on a pidfd for our
    # exit: the kernel empties the namespace before init counts as exited. The
    # supervisor's own reply still comes, for when we die before this is sent.
    answer: dict = {"init_exit_code": code, "trace": trace}
    if emptied:
        answer["emptied"] = True
    with contextlib.suppress(OSError):
        reply.send(json.dumps(answer).encode())
    os._exit(code)


def _empty_namespace(attempts: int = 3) -> bool:
    """Kill and reap every other process of this pid namespace (we are its pid 1).

    What the kernel does when a namespace's init exits, done before our exit: kill(-1)
    reaches every process of the namespace (same uid, and nothing here can change
    uid); a fork racing it either is seen by it or fails, because the forking parent
    already has the signal pending. Killed processes' children are reparented to us, so
    reaping (any kind of child: `WAIT_ALL`) until there is none leaves no process but
    us; our own /proc, which shows only this namespace, confirms it. False if it still
    shows another (then the host waits for our exit instead)."""
    for _ in range(attempts):
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        while True:
            try:
                os.waitpid(-1, WAIT_ALL)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        if all(name == "1" or not name.isdigit() for name in os.listdir("/proc")):
            return True
    return False


def _report_failure(link: socket.socket, error: BaseException) -> None:
    """Init could not be set up: say so on the output of the command it was made for."""
    with contextlib.suppress(BaseException):
        _, fds, _, _ = socket.recv_fds(link, 1 << 20, 2)
        if fds:
            os.write(fds[0], f"sandbox: could not start the command: {error}\n".encode())


class Supervisor:
    """The event loop: requests on the control socket, kills, reaped namespaces.

    One command's namespace (its init, set up and waiting) is made ahead, once the
    previous command is over or `PREPARE_DELAY` into it, so a request normally costs a
    socket message to that init and its posix_spawn of the shell, not a fork of this
    Python process (a request that finds none waits for one to be made).
    """

    def __init__(self, config: dict) -> None:
        self.config = config
        self.control = socket.socket(fileno=config["control_fd"])
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        os.set_blocking(wake_read, False)
        self.wake_read = wake_read
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_write)
        self.selector.register(wake_read, selectors.EVENT_READ, "child")
        self.running: dict[int, socket.socket] = {}  # init pid -> reply socket
        self.trace: dict[int, dict[str, float]] = {}
        self.held: dict[int, int] = {}  # init pid -> its mount namespace, held open
        self.closer: tuple[int, socket.socket] | None = None  # init pid -> when what happened
        self.ready: list[tuple[int, socket.socket]] = []  # prepared inits and their links
        self.prepare_at: float | None = None  # when to make the next init (see `request`)
        self.pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.mount_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)

    def prepare(self) -> None:
        """Make one more waiting init in a new pid and mount namespace (up to
        `READY_INITS`)."""
        if len(self.ready) >= READY_INITS:
            return
        ours, link = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        init = -1
        try:
            _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare")
            init = os.fork()
            if init == 0:
                ours.close()
                _init(self.config, link)  # never returns
        except BaseException:
            ours.close()
            link.close()
            raise
        finally:
            if init != 0:
                # Back in our own namespaces: the next unshare needs it, and our own
                # mounts stay as bwrap made them.
                _check(_libc.setns(self.pid_ns, CLONE_NEWPID), "setns pid")
                _check(_libc.setns(self.mount_ns, CLONE_NEWNS), "setns mnt")
        link.close()
        self.ready.append((init, ours))
        with contextlib.suppress(OSError):
            self.held[init] = os.open(f"/proc/{init}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)

    def request(self) -> bool:
        """Take one request off the control socket; False when the host has gone."""
        fds: list[int] = []
        try:
            message, fds, _, _ = socket.recv_fds(self.control, 1 << 20, 2)
        except OSError:
            return False
        if not message:
            for fd in fds:
                os.close(fd)
            return False
        for fd in fds:
            os.set_inheritable(fd, False)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            return True
        received = time.monotonic()
        out_fd, reply_fd = fds
        reply = socket.socket(fileno=reply_fd)
        try:
            request = json.dumps({**json.loads(message), "received": received}).encode()
            for attempt in range(READY_INITS + 1):
                if not self.ready:
                    self.prepare()  # normally made already, after the previous command
                init, link = self.ready.pop(0)
                try:
                    socket.send_fds(link, [request], [out_fd, reply_fd])
                except OSError:
                    # It died waiting (killed under memory pressure) and is not reaped
                    # yet: take the next one.
                    link.close()
                    if attempt == READY_INITS:
                        raise
                    continue
                link.close()
                break
        except Exception as error:  # a fork refused by pids.max, say
            self.send(reply, {"error": str(error)})
            return True
        finally:
            os.close(out_fd)
        forwarded = time.monotonic()
        self.running[init] = reply
        self.selector.register(reply, selectors.EVENT_READ, init)
        # The replacement is made once this command is over, or PREPARE_DELAY from now
        # if it is still running: made at once, its fork and mounts took a core from
        # this command (on two cores, a third of a short command's time). A command
        # right behind this one takes the second waiting init meanwhile; only when none
        # is left (commands back to back) is one made now, as the next request would
        # otherwise wait for it.
        if not self.ready:
            with contextlib.suppress(OSError):
                self.prepare()
        self.prepare_at = forwarded + PREPARE_DELAY
        self.trace[init] = {"received": received, "forwarded": forwarded}
        return True

    @staticmethod
    def send(reply: socket.socket, message: dict) -> None:
        with contextlib.suppress(OSError):  # the host stopped waiting
            reply.send(json.dumps(message).encode())
        reply.close()

    def reap(self) -> None:
        while True:
            try:
                os.read(self.wake_read, 4096)
            except BlockingIOError:
                break
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.closer is not None and self.closer[0] == pid:
                self.closer[1].close()
                self.closer = None
            for waiting in [r for r in self.ready if r[0] == pid]:
                waiting[1].close()  # a prepared init died (killed under memory pressure)
                self.ready.remove(waiting)
            reply = self.running.pop(pid, None)
            if reply is not None:
                with contextlib.suppress(KeyError):
                    self.selector.unregister(reply)
                code = os.waitstatus_to_exitcode(status)
                trace = {**self.trace.pop(pid, {}), "reaped": time.monotonic()}
                self.send(reply, {"exit_code": code if code >= 0 else None, "trace": trace})
            held = self.held.pop(pid, None)
            if held is not None:
                self.release(held)
            if reply is not None and not self.running:
                self.prepare_at = time.monotonic()  # idle: make the next init now

    def start_closer(self) -> None:
        """A child that closes the mount namespaces the supervisor held (see `release`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            os.closerange(3, theirs.fileno())
            os.closerange(theirs.fileno() + 1, 1 << 16)
            _reset_signals()
            while True:
                try:
                    message, fds, _, _ = socket.recv_fds(theirs, 16, 64)
                except OSError:
                    os._exit(0)
                if not message:
                    os._exit(0)
                for fd in fds:
                    os.close(fd)  # the last reference: the unmounts happen here
        theirs.close()
        self.closer = (pid, ours)

    def release(self, fd: int) -> None:
        """Drop a held mount namespace in the closer, not here.

        Freeing a mount namespace unmounts its mounts and waits for an RCU grace
        period (milliseconds on a loaded machine). Inside the command's init's exit
        that wait came before the supervisor could reap it and reply; holding the
        namespace until after the reply, and dropping it in another process, takes
        it off the command's path and off the next request's.
        """
        if self.closer is not None:
            try:
                socket.send_fds(self.closer[1], [b"c"], [fd])
            except OSError:
                self.closer = None
        os.close(fd)

    def kill(self, init: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(init, signal.SIGKILL)  # init's death ends the whole namespace

    def serve(self) -> None:
        with contextlib.suppress(OSError):
            self.start_closer()
        with contextlib.suppress(OSError):
            self.prepare()
        self.prepare_at = time.monotonic()
        while True:
            wait = None
            if len(self.ready) < READY_INITS and self.prepare_at is not None:
                wait = max(0.0, self.prepare_at - time.monotonic())
            for key, _ in self.selector.select(timeout=wait):
                if key.data == "control":
                    if not self.request():
                        self.shutdown()
                        return
                elif key.data == "child":
                    self.reap()
                elif key.data in self.running:
                    # Read what the host sent (closing a unix socket with unread data
                    # would make the host's read of our reply fail), then kill.
                    with contextlib.suppress(OSError):
                        self.running[key.data].recv(64)
                    self.kill(key.data)
                    self.selector.unregister(key.fileobj)
                    # The reply still goes out once the namespace is reaped.
            if (
                len(self.ready) < READY_INITS
                and self.prepare_at is not None
                and time.monotonic() >= self.prepare_at
            ):
                # One at a time, so a request that came meanwhile is read first.
                try:
                    self.prepare()
                except OSError:
                    self.prepare_at = None  # pids.max, say: the next request tries again
                else:
                    if len(self.ready) >= READY_INITS:
                        self.prepare_at = None

    def shutdown(self) -> None:
        if self.closer is not None:
            self.closer[1].close()  # it exits on EOF
        for init, _ in self.ready:
            self.kill(init)
        for init in list(self.running):
            self.kill(init)
        while True:
            try:
                os.wait()
            except ChildProcessError:
                break


def main() -> None:
    config = json.loads(sys.argv[1])
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        config["last_cap"] = int(handle.read())
    Supervisor(config).serve()


if __name__ == "__main__":
    main()
