"""What a sandbox backend is: the interface third-party backends implement.

A backend turns a workspace directory into a place where commands run. Files are
read and written by the host (see `paths.py`), so a backend only has to run
commands and, if it can, capture the memory of what is running.
"""

from __future__ import annotations

import os
import stat
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Literal

from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.paths import SANDBOX_ROOT
from composer_infra.sandbox.results import CommandResult

Isolation = Literal["none", "namespaces", "gvisor", "vm", "other"]


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine; the message says what is missing."""


class Runtime(ABC):
    """A backend's live handle on one sandbox.

    `workspace` is the host directory; inside the sandbox it is `/workspace`.
    `owner` is the (uid, gid) commands run as, when that differs from ours.
    """

    workspace: Path
    owner: tuple[int, int] | None = None
    guest_workspace: str = SANDBOX_ROOT
    """The workspace's path as commands in the sandbox see it."""

    @abstractmethod
    def run(self, command: str, *, timeout: float) -> CommandResult:
        """Run a shell command in /workspace; every process it started is gone on return."""

    def kill_all(self) -> None:  # noqa: B027 (a no-op is right for some backends)
        """Kill every process the sandbox's commands started, by pid namespace or cgroup.

        Called before grading: nothing the policy started may still run while the
        tests run or their report is read. Backends whose processes all end with
        their command (bwrap: one pid namespace per command) have nothing to do.
        """

    def grade(
        self, test_command: str, *, timeout: float, tests_dir: str | None = None
    ) -> tuple[CommandResult, bytes | None]:
        """Run the task's test command and return its result and pytest's JUnit XML.

        The caller has called `kill_all` first; `tests_dir` (workspace-relative) holds
        the hidden tests, the only place conftests are read from (`junit_command`). This default writes the report into the
        workspace under a random name and reads it after the command (every process of
        which is gone by then); backends that can give the test command a directory no
        other command sees override `_grading_dir` (bwrap, gvisor).
        """
        name = f".composer-junit-{uuid.uuid4().hex}.xml"
        result = self.run(
            junit_command(f"{self.guest_workspace}/{name}", test_command, tests_dir),
            timeout=timeout,
        )
        report = read_report(self.workspace / name)
        (self.workspace / name).unlink(missing_ok=True)
        return result, report

    def start_background(self, command: str) -> None:
        """Start a process that keeps running between commands (memory-level backends)."""
        raise NotImplementedError(
            f"{type(self).__name__} ends every process with its command; background "
            "processes need a backend with memory-level snapshots (gvisor)"
        )

    def checkpoint(self, image_dir: Path) -> bool:
        """Freeze the running processes and write their memory to `image_dir`.

        Returns False when the backend has nothing to save (filesystem-level only).
        After a True, the sandbox stays frozen until `resume(image_dir)`.
        """
        return False

    def resume(self, image_dir: Path) -> None:  # noqa: B027 (optional, no-op by default)
        """Carry on after `checkpoint` (memory-level backends only)."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything; the workspace directory is left for the caller."""


class SandboxBackend(ABC):
    """A kind of sandbox. Register instances through the `composer_sandbox_backends` hook."""

    name: ClassVar[str]
    isolation: ClassVar[Isolation]
    memory_snapshots: ClassVar[bool] = False
    explicit_only: ClassVar[bool] = False
    """Never chosen as a default or fallback; only when asked for by name."""

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when this machine can run the backend, else what is missing and how to get it."""

    @abstractmethod
    def start(
        self,
        workspace: Path,
        config: SandboxConfig,
        *,
        state_dir: Path,
        memory_image: Path | None = None,
    ) -> Runtime:
        """Start a sandbox over `workspace` (already populated).

        `state_dir` is a private directory for the backend (bundles, sockets). With
        `memory_image`, continue the processes saved by `Runtime.checkpoint`.
        """


REPORT_LIMIT = 32 * 1024**2
"""The largest JUnit report read back (a test suite's report is kilobytes)."""


def junit_command(report_path: str, test_command: str, tests_dir: str | None = None) -> str:
    """`test_command` with pytest told to write its JUnit XML report to `report_path`, and
    shut off from everything in the workspace that could change what it reports.

    The policy writes the workspace, and a policy under RL finds every file pytest or
    Python reads before the tests: a root `conftest.py` whose hook marks every test
    passed, a `pytest.ini` whose `addopts` loads a plugin module from the workspace, a
    `pytest.py` that shadows pytest itself. So the grader runs with

    - `-c /dev/null`: no ini file of the workspace (no `addopts`, no plugins); the
      workspace is the rootdir and is put on `sys.path` by pytest (`pythonpath`);
    - no user site-packages (`PYTHONNOUSERSITE`: HOME is the workspace);
    - `--confcutdir=tests_dir` when the hidden tests have a folder of their own: only
      conftests inside it (the grader's) are loaded;
    - `PYTEST_DISABLE_PLUGIN_AUTOLOAD`: only pytest's own plugins; third-party ones
      installed next to the interpreter neither change the report nor slow every grading
      (loading them took 1.1 s of a 1.6 s grading here, hypothesis's imports 0.65 s).

    PYTEST_ADDOPTS is read before any ini file, so `-c` in it holds. A test command that
    starts Python with `-m` should add `-P` (`python -P -m pytest`, the default of
    `Task.test_command`): otherwise the workspace is first on `sys.path` and a `pytest.py`
    there shadows pytest. Tests that start pytest themselves should drop PYTEST_ADDOPTS
    from the child's environment (it names this run's report). Code the tests import
    still runs inside pytest's process: a policy that writes Python to patch pytest from
    an imported module is not stopped here (only an out-of-process grader would).
    """
    env = grading_env("$PWD", report_path, tests_dir)
    env["PYTEST_ADDOPTS"] += " $PYTEST_ADDOPTS"
    exports = " ".join(f'{key}="{value}"' for key, value in env.items())
    return f"export {exports}; {test_command}"


def grading_env(workspace: str, report_path: str, tests_dir: str | None = None) -> dict[str, str]:
    """The environment variables of a grading run (`junit_command` says why each);
    `workspace` is the repository root as the test command sees it."""
    confcut = f" --confcutdir={tests_dir}" if tests_dir else ""
    return {
        "PYTHONNOUSERSITE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_ADDOPTS": (
            f"-c /dev/null --rootdir={workspace} -o pythonpath={workspace}{confcut} "
            f"--junitxml={report_path} -p no:cacheprovider"
        ),
    }


def read_report(path: Path) -> bytes | None:
    """A report file's bytes if it is a regular file (never a FIFO or a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > REPORT_LIMIT:
            return None
        return handle.read(REPORT_LIMIT)
