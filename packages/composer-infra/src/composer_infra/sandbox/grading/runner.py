"""The grader's pytest runner: the one process whose word on the hidden tests counts.

The grader writes this file next to the hidden tests (as `_composer_runner.py`) after every
process of the policy is gone, and the test command becomes

    python -I -B <tests>/_composer_runner.py --report R --nonce-file N --workspace W
        [--tests-dir T] [--import-workspace] [--own-pid-namespace] -- <the task's pytest args>

Why each part:

- `-I`: no PYTHON* variables, no user site, the script's folder not on `sys.path`; `-B`
  and `sys.dont_write_bytecode`: pytest writes no rewritten test module (with its expected
  values) into the workspace's `__pycache__`.
- `prctl(PR_SET_DUMPABLE, 0)` first: processes of the same uid (workspace code the tests
  run) cannot read this process's memory, environment or descriptors through /proc.
- The nonce that signs the report is read from a file the host wrote into the private
  grading directory and deleted at once, before any workspace code runs: it is never on a
  command line (bwrap's init shows its whole argv in /proc) or in an environment.
- pytest runs with no workspace ini file (`-c /dev/null`), conftests only from the hidden
  tests' folder (`--confcutdir`), no third-party plugins (`PYTEST_DISABLE_PLUGIN_AUTOLOAD`;
  `PYTEST_ADDOPTS` and `PYTEST_PLUGINS` dropped), no cache provider.
- After collection the hidden tests' folder is deleted (their text stays in `linecache`
  for pytest's failure reports), so workspace code the tests run cannot read the expected
  values; at the end of the session the probe's child is stopped.
- With `--own-pid-namespace` (bwrap, gVisor: this process is alone in a pid namespace with
  what it started) every other process of the namespace is killed before the report is
  written, so nothing the workspace started can rewrite it afterwards. The report is a
  fresh file (`O_EXCL`, no link followed) holding the nonce, pytest's exit status and each
  test's outcome. The process ends with `os._exit`: no `atexit` hook or finaliser runs
  after the report.

Two ways to run, by what the hidden tests do with workspace code:

- **Through the probe** (the default, `python -P -m pytest`): the workspace is not on
  `sys.path`; hidden tests reach workspace code only through `workspace_probe`, in a
  child, and this process runs pytest itself. No workspace code ever runs in it.
- **Importing it** (`--import-workspace`: plain `python -m pytest`, SWE-bench-format tests
  that must import the repository). Then this process is the *judge* and never runs pytest
  or imports workspace code: it reads the hidden tests, adds the grader's control tests
  (`canaries.py`: copies of the instance's tests that must fail, and two plain ones), and
  runs pytest in a *test process* (this file again, `--child`) which it sends the hidden
  modules' text on stdin. The test process serves those modules from memory (pytest's
  assertion rewriter and an import finder read no file of them) while their files on disk
  are emptied first, so workspace code imported during collection can neither read the
  expected values from disk nor rewrite a test module not yet imported. The test process
  sends each test's phases to the judge over a pipe; the judge records them, checks the
  control tests (a copy that must fail reported passed is tampering), computes the exit
  status from the instance's tests alone, and writes the report. The nonce never enters
  the test process, so nothing there (a thread, an `atexit` hook, a daemon) can sign a
  report. What the test process reports about the instance's own tests can still be
  forged by code that tells the control tests apart; docs/grading.md says what is left.

Standard library and pytest only: the sandbox's interpreter needs nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import stat
import sys
import time
from typing import Any, NoReturn

RUNNER_MODULE = "_composer_runner"
"""The runner's file name (without `.py`) in the folder the grader writes it to."""

CANARIES_FILE = "_composer_canaries.py"
"""`canaries.py` as the grader writes it beside the runner (the judge loads it from there)."""

REPORT_NAME = "report.json"
NONCE_NAME = "nonce"
MESSAGE_LIMIT = 500
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4

EVENT_LIMIT_BYTES = 64 * 1024 * 1024
"""The most the test process may send the judge; past it the test process is killed."""

# What each exit of the runner itself (before pytest) means; pytest's own are 0-5.
EXIT_BAD_ARGUMENTS = 64
EXIT_NO_NONCE = 65
EXIT_BAD_CHILD_INPUT = 66


def _libc() -> Any:
    # By name: `CDLL(None)` costs about 80 ms under gVisor, "libc.so.6" a fraction of it.
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _not_dumpable() -> None:
    """Make /proc/<this pid>/{mem,environ,fd,...} unreadable to other processes of our uid."""
    libc = _libc()
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _parse(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The runner's own options (before `--`) and pytest's arguments (after it)."""
    if "--" not in argv:
        raise ValueError("usage: runner OPTIONS -- PYTEST_ARGS")
    split = argv.index("--")
    own, pytest_args = argv[:split], argv[split + 1 :]
    options: dict[str, Any] = {
        "tests_dir": None,
        "import_workspace": False,
        "own_pid_namespace": False,
        "child": False,
        "event_fd": None,
        "judge": None,
    }
    valued = {"--report": "report", "--nonce-file": "nonce_file", "--workspace": "workspace"}
    optional = {"--tests-dir": "tests_dir", "--event-fd": "event_fd", "--judge": "judge"}
    flags = {
        "--import-workspace": "import_workspace",
        "--own-pid-namespace": "own_pid_namespace",
        "--child": "child",
    }
    index = 0
    while index < len(own):
        arg = own[index]
        if arg in valued or arg in optional:
            if index + 1 >= len(own):
                raise ValueError(f"{arg} needs a value")
            options[valued.get(arg) or optional[arg]] = own[index + 1]
            index += 2
        elif arg in flags:
            options[flags[arg]] = True
            index += 1
        else:
            raise ValueError(f"unknown runner option {arg!r}")
    needed = {"workspace": "--workspace"} if options["child"] else {v: k for k, v in valued.items()}
    missing = [flag for key, flag in needed.items() if key not in options]
    if missing:
        raise ValueError(f"missing runner option(s) {missing}")
    return options, pytest_args


def _take_nonce(path: str) -> str:
    """The nonce's text; the file is gone before anything else runs."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        text = os.read(fd, 256).decode("ascii").strip()
    finally:
        os.close(fd)
        os.unlink(path)
    if len(text) < 32:
        raise OSError(f"{path} does not hold a nonce")
    return text


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ")
    return str(getattr(report, "wasxfail", "") or longrepr or "")


# -- outcomes: from pytest's reports (as events) to one outcome per test ---------------------


class Outcomes:
    """Each test's phases (setup, call, teardown), the collected ids and the collection
    errors, fed event by event: by the `Recorder` in this process (through the probe), or
    from the test process's pipe (importing the workspace)."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, tuple[str, str]]] = {}
        self.collected: list[str] = []
        self.collect_errors: dict[str, str] = {}
        self.finished: int | None = None

    def feed(self, event: Any) -> None:
        """One event; a ValueError if it is not one this runner sends."""
        if type(event) is not dict:
            raise ValueError("an event is not an object")
        kind = event.get("e")
        text = event.get("message", "")
        if type(text) is not str:
            raise ValueError("an event's message is not a string")
        if kind == "phase":
            node, when, outcome = event.get("node"), event.get("when"), event.get("outcome")
            if type(node) is not str or when not in ("setup", "call", "teardown"):
                raise ValueError("a malformed phase event")
            if outcome not in ("passed", "failed", "skipped"):
                raise ValueError("a phase event with an unknown outcome")
            self.phases.setdefault(node, {})[when] = (outcome, text[:MESSAGE_LIMIT])
        elif kind == "collect_error":
            node = event.get("node")
            if type(node) is not str:
                raise ValueError("a malformed collection error event")
            self.collect_errors[node] = text[-MESSAGE_LIMIT:]
        elif kind == "collected":
            ids = event.get("ids")
            if type(ids) is not list or not all(type(i) is str for i in ids):
                raise ValueError("a malformed collected event")
            self.collected = ids
        elif kind == "finished":
            status = event.get("status")
            if type(status) is not int:
                raise ValueError("a malformed finished event")
            self.finished = status
        else:
            raise ValueError(f"an unknown event {kind!r}")

    def tests(self) -> dict[str, dict[str, str]]:
        """Each test's one outcome: an error in setup or teardown is `error`, a failed call
        `failed`, a skip in setup or call `skipped`, `passed` only if all three phases
        passed; a collected test without a full run is an `error`."""
        out: dict[str, dict[str, str]] = {}
        for node, message in self.collect_errors.items():
            out[node] = {"outcome": "error", "message": message}
        for node in dict.fromkeys([*self.collected, *self.phases]):
            phases = self.phases.get(node, {})
            setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
            if setup is None:
                result = ("error", "the test never ran (the session ended first)")
            elif setup[0] == "failed":
                result = ("error", setup[1])
            elif setup[0] == "skipped":
                result = setup
            elif call is None:
                result = ("error", "the test's call phase never ran")
            elif call[0] != "passed":
                result = call
            elif teardown is None:
                result = ("error", "the test's teardown never ran")
            elif teardown[0] == "failed":
                result = ("error", teardown[1])
            else:
                result = ("passed", "")
            if setup is not None and setup[0] == "skipped" and teardown and teardown[0] == "failed":
                result = ("error", teardown[1])
            out[node] = {"outcome": result[0], "message": result[1]}
        return out


class Recorder:
    """A pytest plugin that turns pytest's own reports (collection, setup, call, teardown)
    into events for `emit`, hides the hidden tests after collection and stops the probe.
    With `canaries` (node ids), those tests run last, in that order."""

    def __init__(self, tests_dir: str | None, emit: Any, canaries: list[str] | None = None):
        self.tests_dir = tests_dir
        self.emit = emit
        self.canaries = canaries or []

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            node = report.nodeid or "<collection>"
            message = report.longreprtext[-MESSAGE_LIMIT:]
            self.emit({"e": "collect_error", "node": node, "message": message})

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if not self.canaries:
            return

        def rank(item: Any) -> int:
            for index, node in enumerate(self.canaries):
                if item.nodeid == node or item.nodeid.startswith((f"{node}[", f"{node}::")):
                    return index + 1
            return 0

        items.sort(key=rank)  # stable: the instance's tests keep their order, first
        for item in items:
            if rank(item):
                # Only the outcome of a control test counts: no traceback to format (the
                # dearest part of a failing test; two or three of them fail every grading).
                item.repr_failure = _short_failure

    def pytest_collection_finish(self, session: Any) -> None:
        self.emit({"e": "collected", "ids": [item.nodeid for item in session.items]})
        self._hide_tests()

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.passed:  # an xfail test that passed (not strict) passed too
            outcome, message = "passed", ""
        elif report.skipped:
            outcome = "skipped"
            prefix = "xfail: " if hasattr(report, "wasxfail") else ""
            message = prefix + _skip_reason(report)
        else:
            outcome, message = "failed", report.longreprtext[-MESSAGE_LIMIT:]
        self.emit(
            {
                "e": "phase",
                "node": report.nodeid,
                "when": report.when,
                "outcome": outcome,
                "message": message[:MESSAGE_LIMIT],
            }
        )

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        stop_probe()
        self.emit({"e": "finished", "status": int(exitstatus)})

    def _hide_tests(self) -> None:
        """Delete the hidden tests' folder; keep their lines for pytest's failure reports."""
        if self.tests_dir is None or not os.path.isdir(self.tests_dir):
            return
        import importlib
        import linecache
        import shutil

        # Imported now if a test imports it lazily: its file is about to go.
        with contextlib.suppress(ImportError):
            importlib.import_module("workspace_probe")
        for folder, _, names in os.walk(self.tests_dir):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    if path in linecache.cache:
                        continue  # served from memory (the file on disk is empty)
                    try:
                        with open(path, encoding="utf-8") as handle:
                            lines = handle.readlines()
                    except (OSError, UnicodeDecodeError):
                        continue
                    _cache_lines(path, "".join(lines))
        shutil.rmtree(self.tests_dir, ignore_errors=True)


def _short_failure(excinfo: Any, style: Any = None) -> str:
    return f"{excinfo.typename} (a control test of the grader)"


def _cache_lines(path: str, text: str) -> None:
    """`text` as the lines of `path` for tracebacks; mtime None: `linecache.checkcache`
    keeps the entry with the file gone or emptied."""
    import linecache

    lines = text.splitlines(keepends=True)
    entry = (len(text), None, lines, path)
    linecache.cache[path] = entry
    linecache.cache[os.path.realpath(path)] = entry


def stop_probe() -> None:
    """End the probe's child (and with it what workspace code keeps running there)."""
    probe = sys.modules.get("workspace_probe")
    restart = getattr(probe, "restart", None)
    if callable(restart):
        with contextlib.suppress(Exception):
            restart()


def _kill_others(limit: float = 5.0) -> None:
    """SIGKILL every other process of our pid namespace (`kill(-1)` spares only init and
    the caller) and reap what was ours, until none is left or `limit` passed."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return  # nothing left to signal
        except PermissionError:
            return  # only processes we may not signal (not the sandbox user's) are left
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        time.sleep(0.001)


def _write_report(path: str, data: dict[str, Any]) -> None:
    """A fresh file at `path`, whatever was there (a file, a link, a FIFO, a folder)."""
    text = json.dumps(data).encode()
    for _ in range(5):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except (IsADirectoryError, PermissionError):
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        try:
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            continue
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return
    raise OSError(f"could not create the report {path}")


def _pytest_args(workspace: str, tests_dir: str | None) -> list[str]:
    args = ["-c", os.devnull, f"--rootdir={workspace}", "-p", "no:cacheprovider"]
    if tests_dir is not None:
        args.append(f"--confcutdir={tests_dir}")
    return args


def _isolate(workspace: str, tests_dir: str | None, import_workspace: bool) -> None:
    """This interpreter's environment and `sys.path` for running pytest on hidden tests."""
    sys.dont_write_bytecode = True
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    drop = {"", ".", os.getcwd(), workspace}
    sys.path[:] = [p for p in sys.path if p not in drop]
    if tests_dir is not None:
        sys.path.append(tests_dir)
    if import_workspace:
        sys.path.append(workspace)


def _finish(options: dict[str, Any], report: dict[str, Any], exit_status: int) -> NoReturn:
    """Kill the rest of the pid namespace (if ours), write the report, `os._exit`."""
    if options["own_pid_namespace"]:
        _kill_others()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        _write_report(options["report"], report)
    except OSError as exc:
        os.write(2, f"composer grader: {exc}\n".encode())
    os._exit(exit_status)


# -- through the probe: pytest in this process ---------------------------------------------


def run_in_process(options: dict[str, Any], pytest_args: list[str], nonce: str) -> NoReturn:
    """The hidden tests reach workspace code only through `workspace_probe`'s child."""
    workspace, tests_dir = options["workspace"], options["tests_dir"]
    _isolate(workspace, tests_dir, options["import_workspace"])
    import pytest

    outcomes = Outcomes()
    recorder = Recorder(tests_dir, outcomes.feed)
    args = _pytest_args(workspace, tests_dir)
    exit_status = int(pytest.main([*args, *pytest_args], plugins=[recorder]))
    stop_probe()
    report = {
        "nonce": nonce,
        "exit_status": exit_status,
        "collected": outcomes.collected,
        "tests": outcomes.tests(),
    }
    _finish(options, report, exit_status)


# -- importing the workspace: the judge ------------------------------------------------------


def _grader_files() -> set[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return {
        os.path.join(here, name)
        for name in (f"{RUNNER_MODULE}.py", CANARIES_FILE, "workspace_probe.py")
    }


def _hidden_sources(tests_dir: str) -> dict[str, str]:
    """Every Python file of the hidden tests (not the grader's own), path -> text."""
    skip = _grader_files()
    sources: dict[str, str] = {}
    for folder, dirs, names in os.walk(tests_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in sorted(names):
            path = os.path.normpath(os.path.join(folder, name))
            if not name.endswith(".py") or path in skip or os.path.islink(path):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    sources[path] = handle.read()
            except (OSError, UnicodeDecodeError):
                continue
    return sources


def _load_canaries() -> Any:
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), CANARIES_FILE)
    spec = importlib.util.spec_from_file_location("_composer_canaries", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judge(options: dict[str, Any], pytest_args: list[str], nonce: str) -> NoReturn:
    """Run the tests in a test process, believe only what the control tests allow."""
    import select

    canaries = _load_canaries()
    workspace, tests_dir = options["workspace"], options["tests_dir"]
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    problems: list[str] = []
    sources: dict[str, str] = {}
    plan = canaries.Plan()
    if tests_dir is not None:
        sources = _hidden_sources(tests_dir)
        try:
            plan = canaries.plan(pytest_args, sources, tests_dir, workspace, os.getcwd())
        except Exception as exc:  # a grader bug: fail closed, say so, grade nothing on faith
            problems.append(f"the grader could not plan its control tests: {exc!r}")
        sources.update(plan.sources)
        # The test modules pytest imports are served from memory in the test process; on
        # disk they are empty before any workspace code runs.
        for path in sources:
            name = os.path.basename(path)
            if canaries.is_test_file(name) or name == "conftest.py" or path in plan.sources:
                with open(path, "w", encoding="utf-8"):
                    pass
    # posix_spawn, not subprocess: no fork of this interpreter, no import of subprocess
    # (both cost under gVisor). Pipes are close-on-exec: the test process keeps only its
    # stdin (the hidden modules' text) and the events pipe it is told of.
    stdin_read, stdin_write = os.pipe()
    read_fd, write_fd = os.pipe()
    os.set_inheritable(write_fd, True)
    argv = [sys.executable, "-I", "-B", os.path.abspath(__file__), "--child"]
    argv += ["--workspace", workspace, "--event-fd", str(write_fd), "--judge", str(os.getpid())]
    if tests_dir is not None:
        argv += ["--tests-dir", tests_dir]
    argv += ["--", *pytest_args, *plan.args]
    payload = json.dumps({"sources": sources, "canaries": [c.node for c in plan.canaries]})
    try:
        pid = os.posix_spawn(
            sys.executable, argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, stdin_read, 0)]
        )
    finally:
        os.close(stdin_read)
        os.close(write_fd)
    try:
        with os.fdopen(stdin_write, "wb") as stdin:
            stdin.write(payload.encode())
    except OSError:
        pass  # it died first: its exit tells
    code: int | None = None

    def poll() -> int | None:
        nonlocal code
        if code is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
        return code

    outcomes = Outcomes()
    buffer, total, malformed = b"", 0, False

    def lines(data: bytes) -> bytes:
        nonlocal malformed
        *complete, rest = data.split(b"\n")
        for line in complete:
            try:
                outcomes.feed(json.loads(line))
            except (ValueError, RecursionError):
                malformed = True
        return rest

    os.set_blocking(read_fd, False)
    while True:
        exited = poll() is not None
        # Once it exited, only what is in the pipe already: a descendant may hold it open.
        ready, _, _ = select.select([read_fd], [], [], 0 if exited else 0.05)
        if not ready:
            if exited:
                break
            continue
        try:
            chunk = os.read(read_fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            break  # every writer is gone (its exit is awaited below)
        total += len(chunk)
        if total > EVENT_LIMIT_BYTES:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            problems.append(f"the test process sent more than {EVENT_LIMIT_BYTES} bytes of events")
            break
        buffer = lines(buffer + chunk)
    os.close(read_fd)
    if code is None:
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if malformed:
        problems.append("the test process sent events the runner does not send")
    if outcomes.finished is None:
        problems.append(
            f"the test process exited with status {code} before its pytest session finished"
        )
    elif code != outcomes.finished:
        problems.append(
            f"the test process exited with status {code} but its pytest session finished "
            f"with status {outcomes.finished}"
        )
    everything = outcomes.tests()
    control = [c.node for c in plan.canaries]
    tests = {
        t: entry
        for t, entry in everything.items()
        if not any(canaries.matches(t, node) for node in control)
    }
    problems += canaries.judge(
        plan.canaries, everything, outcomes.collect_errors, outcomes.finished, pytest_args
    )
    bad = [t for t, entry in tests.items() if entry["outcome"] in ("failed", "error")]
    if outcomes.finished in (2, 3, 4):
        exit_status = outcomes.finished
    elif not tests:
        exit_status = 5
    else:
        exit_status = 1 if bad else 0
    report = {
        "nonce": nonce,
        "exit_status": exit_status,
        "collected": [c for c in outcomes.collected if c in tests],
        "tests": tests,
        "problems": problems,
        "canaries": {t: e for t, e in everything.items() if t not in tests},
    }
    _finish(options, report, exit_status)


# -- importing the workspace: the test process -----------------------------------------------


def _serve_from_memory(sources: dict[str, str]) -> None:
    """Hidden modules come from `sources`, never from their (emptied) files: pytest's
    assertion rewriter reads them here, a finder behind it serves the others (helpers,
    packages), and no cached bytecode of them is believed."""
    import importlib.util

    from _pytest.assertion import rewrite

    encoded = {path: text.encode("utf-8") for path, text in sources.items()}
    original_rewrite, original_read_pyc = rewrite._rewrite_test, rewrite._read_pyc

    def rewrite_test(fn: Any, config: Any) -> Any:
        source = encoded.get(os.path.normpath(str(fn)))
        if source is None:
            return original_rewrite(fn, config)

        class InMemory(type(fn)):  # type: ignore[misc]
            def read_bytes(self) -> bytes:
                return source  # type: ignore[return-value]

        return original_rewrite(InMemory(fn), config)

    def read_pyc(source: Any, pyc: Any, trace: Any = None) -> Any:
        if os.path.normpath(str(source)) in encoded:
            return None
        return original_read_pyc(source, pyc, trace) if trace else original_read_pyc(source, pyc)

    rewrite._rewrite_test = rewrite_test
    rewrite._read_pyc = read_pyc
    for path, text in sources.items():
        _cache_lines(path, text)
    stems = {os.path.splitext(os.path.basename(p))[0] for p in sources}
    stems |= {os.path.basename(os.path.dirname(p)) for p in sources}

    class Loader:
        def __init__(self, path: str) -> None:
            self.path = path

        def create_module(self, spec: Any) -> None:
            return None

        def exec_module(self, module: Any) -> None:
            code = compile(sources[self.path], self.path, "exec", dont_inherit=True)
            exec(code, module.__dict__)

        def get_source(self, name: str) -> str:
            return sources[self.path]

    class Finder:
        """After pytest's rewriter, before the path finder: hidden modules it does not
        rewrite, by the same search order (the first folder on the path holding the name;
        a package before a module)."""

        def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
            tail = name.rpartition(".")[2]
            if tail not in stems:
                return None
            for entry in sys.path if path is None else path:
                if not isinstance(entry, str):
                    continue
                base = os.path.join(os.path.abspath(entry), tail)
                package = os.path.join(base, "__init__.py")
                for candidate, is_package in ((package, True), (base + ".py", False)):
                    if candidate in sources:
                        return importlib.util.spec_from_file_location(
                            name,
                            candidate,
                            loader=Loader(candidate),  # type: ignore[arg-type]
                            submodule_search_locations=[base] if is_package else None,
                        )
                if os.path.isdir(base) or os.path.exists(base + ".py"):
                    return None  # a module outside the hidden tests comes first
            return None

    sys.meta_path.insert(0, Finder())  # type: ignore[arg-type]


def run_child(options: dict[str, Any], pytest_args: list[str]) -> NoReturn:
    """The test process: pytest on the hidden tests with the workspace importable; each
    report goes to the judge as it comes. It holds no secret."""
    # SIGKILL when the judge dies (set here, not before exec: the judge spawns without a
    # fork of itself); a judge already gone is no judge.
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if str(os.getppid()) != options["judge"]:
        os._exit(EXIT_BAD_CHILD_INPUT)
    try:
        payload = json.loads(sys.stdin.buffer.read())
        sources: dict[str, str] = payload["sources"]
        canaries: list[str] = payload["canaries"]
        event_fd = int(options["event_fd"])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"composer grader: bad input to the test process: {exc}", file=sys.stderr)
        os._exit(EXIT_BAD_CHILD_INPUT)
    with contextlib.suppress(OSError):
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    os.set_inheritable(event_fd, False)
    workspace, tests_dir = options["workspace"], options["tests_dir"]
    _isolate(workspace, tests_dir, import_workspace=True)
    import pytest

    _serve_from_memory(sources)

    def emit(event: dict[str, Any]) -> None:
        data = (json.dumps(event) + "\n").encode()
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(event_fd, data) :]

    recorder = Recorder(tests_dir, emit, canaries)
    Recorder.pytest_collection_modifyitems = pytest.hookimpl(trylast=True)(  # type: ignore[method-assign]
        Recorder.pytest_collection_modifyitems
    )
    args = _pytest_args(workspace, tests_dir)
    exit_status = int(pytest.main([*args, *pytest_args], plugins=[recorder]))
    stop_probe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(exit_status)


def main(argv: list[str]) -> NoReturn:
    _not_dumpable()
    try:
        options, pytest_args = _parse(argv)
    except ValueError as exc:
        print(f"composer grader: {exc}", file=sys.stderr)
        os._exit(EXIT_BAD_ARGUMENTS)
    if options["child"]:
        run_child(options, pytest_args)
    try:
        nonce = _take_nonce(options["nonce_file"])
    except (OSError, UnicodeDecodeError) as exc:
        print(f"composer grader: no nonce: {exc}", file=sys.stderr)
        os._exit(EXIT_NO_NONCE)
    if options["import_workspace"]:
        judge(options, pytest_args, nonce)
    run_in_process(options, pytest_args, nonce)


if __name__ == "__main__":
    main(sys.argv[1:])
