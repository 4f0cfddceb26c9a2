"""Workspace code run in a child process, its values brought back as plain data.

Hidden tests must not import the code they judge. Code a test imports runs inside the
grader's pytest process, and there a policy under RL can patch pytest's reporting
(`TestReport`), register an `atexit` hook that rewrites the report, or return an object
whose `__eq__` is always true so that every assertion believes it. So a hidden test asks
this module for values instead::

    from workspace_probe import call, evaluate, run

    assert call("mathops", "combine", 7, 3) == 10
    assert evaluate("[p.x for p in shapes.load()]", imports=["shapes"]) == [1, 2]
    proc = run(["python", "app.py"])
    assert proc.returncode == 0 and "ok" in proc.stdout

The workspace code runs in one child interpreter per test session (`python -I`, a clean
environment, the workspace after the standard library on `sys.path`, so a workspace
`json.py` shadows nothing). Requests go to it as JSON lines on its stdin; answers come back
as JSON on a pipe of their own and are decoded here into exact built-in types (`int`, `str`,
`tuple`, `dict`, ... and `ObjectValue` for other objects' attributes), so nothing the
workspace defines ever reaches this process: the comparison is between plain data. The
child can answer anything, but only for its own values, which the workspace decides anyway.

A child that raises, exits, hangs or answers what is not plain data fails the test with
`WorkspaceError` (an `AssertionError`, so pytest counts a failure), its reason and the tail
of its output in the message.

This file is copied next to the hidden tests as `workspace_probe.py` (composer-infra's
grader does it) and uses the standard library only: the sandbox's interpreter needs nothing
but pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MODULE_NAME = "workspace_probe"
"""The name hidden tests import this file by."""

WORKSPACE = Path(__file__).resolve().parent.parent
"""The repository root: this file lies in the hidden tests' folder, one level below it."""

TIMEOUT_S = 30.0
"""How long one request may take before the child is killed and the test fails."""

MAX_REPLY_BYTES = 16 * 1024 * 1024
OUTPUT_TAIL_BYTES = 4096
MAX_DEPTH = 32
MAX_OUTPUT_BYTES = 1024 * 1024
"""What `run` keeps of each of a command's stdout and stderr."""
FLOOD_BYTES = 16 * 1024 * 1024
"""Output past which workspace code (the child, or a command `run` started) is killed."""
MAX_OUTPUT_BYTES_TEXT = 4 * 1024 * 1024
"""The largest file `workspace_text` reads."""


class WorkspaceError(AssertionError):
    """Workspace code raised, died, hung or answered what is not plain data."""


class ObjectValue:
    """An object the workspace returned, as its type's name and its attributes (plain data).

    Attribute access and equality work on that data, never on the workspace's class.
    """

    __slots__ = ("attrs", "type_name")

    def __init__(self, type_name: str, attrs: dict[str, Any]) -> None:
        object.__setattr__(self, "type_name", type_name)
        object.__setattr__(self, "attrs", attrs)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.attrs[name]
        except KeyError:
            raise AttributeError(f"{self.type_name} object has no attribute {name!r}") from None

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is ObjectValue
            and self.type_name == other.type_name
            and self.attrs == other.attrs
        )

    def __hash__(self) -> int:
        return hash(self.type_name)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"{self.type_name}({inner})"


# -- the wire format: JSON where every object is a tag -------------------------------------

_TAGS = ("tuple", "set", "frozenset", "dict", "bytes", "object", "float")


def encode(value: Any, depth: int = 0) -> Any:
    """`value` (plain data) as JSON; lists stay lists, every other container is a tag."""
    if depth > MAX_DEPTH:
        raise TypeError("the value is nested too deeply")
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if value == value and abs(value) != float("inf") else {"float": repr(value)}
    if type(value) is list:
        return [encode(v, depth + 1) for v in value]
    if type(value) is tuple:
        return {"tuple": [encode(v, depth + 1) for v in value]}
    if type(value) in (set, frozenset):
        items = sorted((encode(v, depth + 1) for v in value), key=json.dumps)
        return {type(value).__name__: items}
    if type(value) is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if type(value) is bytes:
        return {"bytes": value.hex()}
    if type(value) is ObjectValue:
        return {"object": [value.type_name, encode(value.attrs, depth + 1)]}
    raise TypeError(f"a {type(value).__name__} is not plain data")


def decode(data: Any, depth: int = 0) -> Any:
    """What `encode` wrote, as exact built-in types; anything else is a `WorkspaceError`."""
    if depth > MAX_DEPTH:
        raise WorkspaceError("the workspace answered a value nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag in ("tuple", "set", "frozenset", "dict") and type(body) is not list:
            raise WorkspaceError(f"the workspace answered a malformed {tag}")
        if tag == "tuple":
            return tuple(decode(v, depth + 1) for v in body)
        if tag == "set":
            return {decode(v, depth + 1) for v in body}
        if tag == "frozenset":
            return frozenset(decode(v, depth + 1) for v in body)
        if tag == "dict":
            pairs = [decode(p, depth + 1) for p in body]
            if not all(type(p) is list and len(p) == 2 for p in pairs):
                raise WorkspaceError("the workspace answered a malformed dict")
            return {k: v for k, v in pairs}
        if tag == "bytes" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "object" and type(body) is list and len(body) == 2 and type(body[0]) is str:
            attrs = decode(body[1], depth + 1)
            if type(attrs) is dict and all(type(k) is str for k in attrs):
                return ObjectValue(body[0], attrs)
    raise WorkspaceError(f"the workspace answered something that is not plain data: {data!r:.200}")


# -- the child -----------------------------------------------------------------------------

CHILD_SOURCE = r"""
import importlib, json, os, sys
reply = os.fdopen(int(sys.argv[1]), "w", encoding="utf-8")
requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
sys.stdin = open(os.devnull)
sys.argv = ["workspace_probe"]
sys.path.append(os.getcwd())
sys.dont_write_bytecode = True

def plain(v, depth=0):
    if depth > 32:
        raise TypeError("the value is nested too deeply")
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int.__index__(v) if type(v) is not int else v
    if isinstance(v, float):
        v = float.__float__(v)
        return v if v == v and abs(v) != float("inf") else {"float": repr(v)}
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).hex()}
    if isinstance(v, list):
        return [plain(x, depth + 1) for x in v]
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return {"tuple": [plain(x, depth + 1) for x in v]}
    if isinstance(v, (set, frozenset)):
        kind = "frozenset" if isinstance(v, frozenset) else "set"
        return {kind: sorted((plain(x, depth + 1) for x in v), key=json.dumps)}
    if isinstance(v, dict):
        return {"dict": [[plain(k, depth + 1), plain(x, depth + 1)] for k, x in v.items()]}
    names = getattr(type(v), "__dataclass_fields__", None)
    if names is not None:
        attrs = {n: getattr(v, n) for n in names}
    elif hasattr(v, "_fields"):
        attrs = {n: getattr(v, n) for n in v._fields}
    elif hasattr(v, "__dict__") and not callable(v) and type(v).__module__ != "builtins":
        attrs = {n: x for n, x in vars(v).items() if not n.startswith("_")}
    else:
        raise TypeError("a %s is not plain data" % type(v).__name__)
    return {"object": [type(v).__name__, plain(attrs, depth + 1)]}

def value(data):
    if isinstance(data, list):
        return [value(x) for x in data]
    if isinstance(data, dict):
        ((tag, body),) = data.items()
        if tag == "tuple":
            return tuple(value(x) for x in body)
        if tag in ("set", "frozenset"):
            return (set if tag == "set" else frozenset)(value(x) for x in body)
        if tag == "dict":
            return {value(k): value(x) for k, x in body}
        if tag == "bytes":
            return bytes.fromhex(body)
        if tag == "float":
            return float(body)
        raise ValueError("unknown tag %r" % tag)
    return data

for line in requests:
    request = json.loads(line)
    try:
        if request["op"] == "call":
            target = importlib.import_module(request["module"])
            for part in request["function"].split("."):
                target = getattr(target, part)
            result = target(*value(request["args"]), **value(request["kwargs"]))
        else:
            space = {"__builtins__": __builtins__}
            for name in request["imports"]:
                space[name.split(".")[0]] = importlib.import_module(name.split(".")[0])
                importlib.import_module(name)
            if request["setup"]:
                exec(request["setup"], space)
            result = eval(request["expr"], space)
        answer = {"ok": True, "value": plain(result)}
    except BaseException as exc:
        answer = {"ok": False, "error": ("%s: %s" % (type(exc).__name__, exc))[:2000]}
    try:
        text = json.dumps(answer)
    except BaseException as exc:
        text = json.dumps({"ok": False, "error": "unencodable answer: %s" % exc})
    reply.write(text + "\n")
    reply.flush()
"""


def child_env(workspace: Path) -> dict[str, str]:
    """A clean environment for workspace code: no grader variables, no PYTHON* settings."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workspace),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


class _Tail:
    """Drains a pipe in a thread, keeping only its last bytes (a flood cannot block the child
    or fill the grader's memory); past `FLOOD_BYTES` in all it calls `on_flood` once (the
    child is killed then, rather than flooding until the request's timeout)."""

    def __init__(self, stream: Any, on_flood: Any = None) -> None:
        self.data = b""
        self.total = 0
        self._on_flood = on_flood
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            self.data = (self.data + chunk)[-OUTPUT_TAIL_BYTES:]
            self.total += len(chunk)
            if self.total > FLOOD_BYTES and self._on_flood is not None:
                self._on_flood()
                self._on_flood = None

    def text(self) -> str:
        self._thread.join(timeout=1.0)
        return self.data.decode("utf-8", errors="replace")


class Child:
    """One interpreter running workspace code, answering requests until it is stopped."""

    def __init__(self, workspace: Path = WORKSPACE) -> None:
        self.workspace = workspace
        _load_libc()
        read_fd, write_fd = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", CHILD_SOURCE, str(write_fd)],
                cwd=workspace,
                env=child_env(workspace),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            os.close(write_fd)
        self._replies = os.fdopen(read_fd, "rb")
        self._buffer = b""
        self.flooded = False
        self._output = _Tail(self.process.stdout, on_flood=self._flood)

    def _flood(self) -> None:
        self.flooded = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, 9)

    def ask(self, request: Mapping[str, Any], timeout: float = TIMEOUT_S) -> Any:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died("before it read the request") from None
        line = self._read_line(timeout)
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkspaceError(
                f"the workspace answered what is not JSON: {line!r:.200}"
            ) from None
        if type(answer) is not dict or type(answer.get("ok")) is not bool:
            raise WorkspaceError(f"the workspace answered a malformed reply: {line!r:.200}")
        if not answer["ok"]:
            raise WorkspaceError(f"workspace code raised {answer.get('error')!s:.2000}")
        return decode(answer.get("value"))

    def _read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        fd = self._replies.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise WorkspaceError(
                    f"workspace code did not answer within {timeout:g} s; its output ended "
                    f"with: {self._output.text()[-1000:]!r}"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._died("before it answered")
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                self.stop()
                raise WorkspaceError(f"the workspace's answer is over {MAX_REPLY_BYTES} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _died(self, when: str) -> WorkspaceError:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.stop()
            code = self.process.returncode
        if self.flooded:
            return WorkspaceError(
                f"the workspace process wrote more than {FLOOD_BYTES} bytes of output and was "
                f"killed {when}"
            )
        return WorkspaceError(
            f"the workspace process exited with status {code} {when}; its output ended with: "
            f"{self._output.text()[-1000:]!r}"
        )

    def stop(self) -> None:
        """Kill the child and everything in its session (a daemon that called setsid
        escapes this, and the sandbox's pid namespace ends it with the test command)."""
        if self.process.poll() is None:
            _kill_group(self.process)
        self._replies.close()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


_child: Child | None = None


def _current() -> Child:
    global _child
    if _child is None or not _child.alive:
        _child = Child()
    return _child


def restart() -> None:
    """Start the next request in a fresh interpreter (module state, imports forgotten)."""
    global _child
    if _child is not None:
        _child.stop()
        _child = None


def call(module: str, function: str, *args: Any, **kwargs: Any) -> Any:
    """`module.function(*args, **kwargs)` computed in the workspace's child; the value.

    `function` may be dotted (`"Cart.total"` for a static method or a class to construct).
    Arguments travel as plain data.
    """
    request = {
        "op": "call",
        "module": module,
        "function": function,
        "args": encode(list(args)),
        "kwargs": encode(dict(kwargs)),
    }
    return _current().ask(request)


def evaluate(expression: str, imports: Sequence[str] = (), setup: str = "") -> Any:
    """An expression evaluated in the workspace's child with `imports` imported (and the
    statements `setup` run first, in the same namespace); its value as plain data."""
    return _current().ask(
        {"op": "eval", "expr": expression, "imports": list(imports), "setup": setup}
    )


def workspace_text(path: str, limit: int = MAX_OUTPUT_BYTES_TEXT) -> str:
    """A workspace file's text, read as data (never imported): a regular file only (no link,
    FIFO or device, which could hang or redirect the read), at most `limit` bytes; a missing
    or odd file fails the test with `WorkspaceError`."""
    target = WORKSPACE / path
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise WorkspaceError(f"{path} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{path} is not a regular file")
        if info.st_size > limit:
            raise WorkspaceError(f"{path} is over {limit} bytes")
        return handle.read(limit).decode("utf-8", errors="replace")


def python_argv(argv: Sequence[str], cwd: Path) -> list[str]:
    """`argv` with a leading `python` made this interpreter, isolated (`-I`: no PYTHON*
    variables, no user site, the script's folder not first on `sys.path`), the script's
    folder and the working directory appended after the standard library."""
    argv = list(argv)
    if not argv or argv[0] not in ("python", "python3"):
        return argv
    rest = argv[1:]
    if rest[:1] == ["-m"] and len(rest) >= 2:
        launch = f"runpy.run_module({rest[1]!r}, run_name='__main__', alter_sys=True)"
        folders = [str(cwd)]
        sys_argv = [rest[1], *rest[2:]]
    elif rest and not rest[0].startswith("-"):
        script = str((cwd / rest[0]).resolve())
        launch = f"runpy.run_path({script!r}, run_name='__main__')"
        folders = [str(Path(script).parent), str(cwd)]
        sys_argv = [rest[0], *rest[1:]]
    else:
        return [sys.executable, "-I", *rest]
    boot = (
        "import runpy, sys; "
        f"sys.path[:] = [p for p in sys.path if p not in ('', '.')] + {folders!r}; "
        f"sys.argv = {sys_argv!r}; {launch}"
    )
    return [sys.executable, "-I", "-c", boot]


def run(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    timeout: float = 60.0,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command of the repository (`["python", "app.py"]`) in a clean environment; a
    leading `python` runs isolated with the standard library first (`python_argv`).

    stdout and stderr keep their first `MAX_OUTPUT_BYTES` each (a flood is cut, never held
    whole); a command that runs past `timeout` fails the test with `WorkspaceError`.
    """
    folder = WORKSPACE if cwd is None else Path(cwd)
    _load_libc()
    process = subprocess.Popen(
        python_argv(argv, folder),
        cwd=folder,
        env={**child_env(WORKSPACE), **(env or {})},
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    streams = [_Head(process.stdout), _Head(process.stderr)]
    if input is not None and process.stdin is not None:
        try:
            process.stdin.write(input.encode())
            process.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    while True:
        try:
            code = process.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        if sum(s.total for s in streams) > FLOOD_BYTES:
            _kill_group(process)
            raise WorkspaceError(
                f"{' '.join(argv)} wrote more than {FLOOD_BYTES} bytes of output"
            ) from None
        if time.monotonic() > deadline:
            _kill_group(process)
            raise WorkspaceError(f"{' '.join(argv)} ran past {timeout:g} s") from None
    out, err = (s.text() for s in streams)
    return subprocess.CompletedProcess(list(argv), code, out, err)


class _Head:
    """Drains a pipe in a thread, keeping its first `MAX_OUTPUT_BYTES`."""

    def __init__(self, stream: Any) -> None:
        self.data = b""
        self.total = 0
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            self.total += len(chunk)
            if len(self.data) < MAX_OUTPUT_BYTES:
                self.data += chunk[: MAX_OUTPUT_BYTES - len(self.data)]

    def text(self) -> str:
        self._thread.join(timeout=5.0)
        return self.data.decode("utf-8", errors="replace")


_libc: Any = None


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies, so workspace
    code never outlives the tests that ran it (grading outside a sandbox has no pid
    namespace to end it). libc is loaded once, in the parent (`_load_libc`)."""
    if _libc:
        _libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


def _load_libc() -> None:
    global _libc
    if _libc is None:
        import ctypes

        try:
            _libc = ctypes.CDLL("libc.so.6")
        except OSError:  # not glibc: no parent-death signal (a sandbox ends them anyway)
            _libc = False


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()
