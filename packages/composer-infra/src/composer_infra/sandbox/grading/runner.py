"""The grader's pytest runner: the one process whose word on the hidden tests counts.

The grader writes this file next to the hidden tests (as `_composer_runner.py`) after every
process of the policy is gone, and the test command becomes

    python -I -B <tests>/_composer_runner.py --report R --nonce-file N --workspace W
        [--tests-dir T] [--import-workspace] [--own-pid-namespace] -- <the task's pytest args>

Why each part:

- `-I`: no PYTHON* variables, no user site, the script's folder not on `sys.path`; `-B`
  and `sys.dont_write_bytecode`: pytest writes no rewritten test module (with its expected
  values) into the workspace's `__pycache__`.
- The workspace is not on `sys.path` (hidden tests reach workspace code only through
  `workspace_probe`, in a child), unless the task's command is plain `python -m pytest`
  (`--import-workspace`: SWE-bench-format tests that must import the repository; it is then
  appended after the standard library, so a workspace `json.py` shadows nothing). The
  hidden tests' folder is appended too, so `workspace_probe` is found from any subfolder.
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
  after the report (code imported in-process could have registered one).

Standard library and pytest only: the sandbox's interpreter needs nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import linecache
import os
import shutil
import signal
import stat
import sys
import time
from typing import Any, NoReturn

RUNNER_MODULE = "_composer_runner"
"""The runner's file name (without `.py`) in the folder the grader writes it to."""

REPORT_NAME = "report.json"
NONCE_NAME = "nonce"
MESSAGE_LIMIT = 500
PR_SET_DUMPABLE = 4

# What each exit of the runner itself (before pytest) means; pytest's own are 0-5.
EXIT_BAD_ARGUMENTS = 64
EXIT_NO_NONCE = 65


def _not_dumpable() -> None:
    """Make /proc/<this pid>/{mem,environ,fd,...} unreadable to other processes of our uid."""
    # By name: `CDLL(None)` costs about 80 ms under gVisor, "libc.so.6" a fraction of it.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
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
    }
    valued = {"--report": "report", "--nonce-file": "nonce_file", "--workspace": "workspace"}
    flags = {"--import-workspace": "import_workspace", "--own-pid-namespace": "own_pid_namespace"}
    index = 0
    while index < len(own):
        arg = own[index]
        if arg in valued or arg == "--tests-dir":
            if index + 1 >= len(own):
                raise ValueError(f"{arg} needs a value")
            key = valued.get(arg, "tests_dir")
            options[key] = own[index + 1]
            index += 2
        elif arg in flags:
            options[flags[arg]] = True
            index += 1
        else:
            raise ValueError(f"unknown runner option {arg!r}")
    missing = [flag for flag, key in valued.items() if key not in options]
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


class Recorder:
    """A pytest plugin that records each test's outcome from pytest's own reports (setup,
    call and teardown), hides the hidden tests after collection and stops the probe."""

    def __init__(self, tests_dir: str | None) -> None:
        self.tests_dir = tests_dir
        self.phases: dict[str, dict[str, tuple[str, str]]] = {}
        self.collected: list[str] = []
        self.collect_errors: dict[str, str] = {}

    # -- pytest hooks --------------------------------------------------------------------

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            node = report.nodeid or "<collection>"
            self.collect_errors[node] = report.longreprtext[-MESSAGE_LIMIT:]

    def pytest_collection_finish(self, session: Any) -> None:
        self.collected = [item.nodeid for item in session.items]
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
        self.phases.setdefault(report.nodeid, {})[report.when] = (outcome, message[:MESSAGE_LIMIT])

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        stop_probe()

    # -- what the report says ------------------------------------------------------------

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

    def _hide_tests(self) -> None:
        """Delete the hidden tests' folder; keep their lines for pytest's failure reports."""
        if self.tests_dir is None or not os.path.isdir(self.tests_dir):
            return
        import importlib

        # Imported now if a test imports it lazily: its file is about to go.
        with contextlib.suppress(ImportError):
            importlib.import_module("workspace_probe")
        for folder, _, names in os.walk(self.tests_dir):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    try:
                        with open(path, encoding="utf-8") as handle:
                            lines = handle.readlines()
                    except (OSError, UnicodeDecodeError):
                        continue
                    # mtime None: `linecache.checkcache` keeps the entry with the file gone.
                    entry = (sum(map(len, lines)), None, lines, path)
                    linecache.cache[path] = entry
                    linecache.cache[os.path.realpath(path)] = entry
        shutil.rmtree(self.tests_dir, ignore_errors=True)


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


def main(argv: list[str]) -> NoReturn:
    _not_dumpable()
    try:
        options, pytest_args = _parse(argv)
    except ValueError as exc:
        print(f"composer grader: {exc}", file=sys.stderr)
        os._exit(EXIT_BAD_ARGUMENTS)
    try:
        nonce = _take_nonce(options["nonce_file"])
    except (OSError, UnicodeDecodeError) as exc:
        print(f"composer grader: no nonce: {exc}", file=sys.stderr)
        os._exit(EXIT_NO_NONCE)
    sys.dont_write_bytecode = True
    workspace = options["workspace"]
    tests_dir = options["tests_dir"]
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    drop = {"", ".", os.getcwd(), workspace}
    sys.path[:] = [p for p in sys.path if p not in drop]
    if tests_dir is not None:
        sys.path.append(tests_dir)
    if options["import_workspace"]:
        sys.path.append(workspace)

    import pytest

    recorder = Recorder(tests_dir)
    args = ["-c", os.devnull, f"--rootdir={workspace}", "-p", "no:cacheprovider"]
    if tests_dir is not None:
        args.append(f"--confcutdir={tests_dir}")
    exit_status = int(pytest.main([*args, *pytest_args], plugins=[recorder]))
    stop_probe()
    if options["own_pid_namespace"]:
        _kill_others()
    report = {
        "nonce": nonce,
        "exit_status": exit_status,
        "collected": recorder.collected,
        "tests": recorder.tests(),
    }
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        _write_report(options["report"], report)
    except OSError as exc:
        os.write(2, f"composer grader: {exc}\n".encode())
    os._exit(exit_status)


if __name__ == "__main__":
    main(sys.argv[1:])
