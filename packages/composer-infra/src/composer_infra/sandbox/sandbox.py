"""A sandbox: one task's workspace, the agent's tools on it, and its snapshots.

Tool calls go through `Sandbox.call(name, arguments)` and always come back as a
`ToolResult`: a bad call is an error the model can read, never an exception that
ends the episode. File tools act on the host's copy of the workspace through
`WorkspaceFS` (which cannot be led out of it); `run` and the tests go through the
backend's runtime.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import tempfile
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from composer_infra.sandbox.archive import Snapshot, SnapshotStore
from composer_infra.sandbox.backend import Runtime, SandboxBackend
from composer_infra.sandbox.config import SandboxConfig
from composer_infra.sandbox.grading import (
    GradingRun,
    build_report,
    grader_files,
    parse_test_command,
    refused,
)
from composer_infra.sandbox.mounts import mount_workspace, unmount
from composer_infra.sandbox.paths import PathError, WorkspaceFS
from composer_infra.sandbox.registry import BackendRegistry, default_registry
from composer_infra.sandbox.results import TestReport, ToolResult
from composer_infra.sandbox.task import Task
from composer_infra.sandbox.tools import (
    TOOL_ARGS,
    EditFileArgs,
    FinishArgs,
    ListFilesArgs,
    ReadFileArgs,
    RunArgs,
    TodoArgs,
    TodoList,
    WriteFileArgs,
)
from composer_infra.sandbox.tree import copy_tree, remove_tree

log = logging.getLogger(__name__)

_work_root: Path | None = None


def _remove_quietly(path: Path) -> bool:
    """Delete a sandbox's directory however deep or odd (its workspace's tmpfs unmounted
    first); log (not raise) what stays."""
    try:
        unmount(path / "workspace")
        remove_tree(path)
        return True
    except Exception:
        log.exception("could not delete %s", path)
        return False


def check_timeout(timeout: float, limit: float, what: str) -> float:
    """`timeout` if it is a finite number of seconds in (0, limit], else a ValueError saying so."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ValueError(f"{what} timeout must be a number of seconds, got {timeout!r}")
    if not math.isfinite(timeout) or timeout <= 0 or timeout > limit:
        raise ValueError(
            f"{what} timeout must be more than 0 and at most {limit:g} seconds "
            f"(SandboxConfig.max_command_timeout), got {timeout!r}"
        )
    return float(timeout)


def default_work_dir() -> Path:
    """Where sandboxes live unless told otherwise: one private temp directory per process."""
    global _work_root
    if _work_root is None:
        _work_root = Path(tempfile.mkdtemp(prefix="composer-sandboxes-"))
        # Sandboxes not closed by the end of the process go with it.
        atexit.register(_remove_quietly, _work_root)
    return _work_root


def _resolve_backend(
    backend: str | SandboxBackend | None, registry: BackendRegistry | None
) -> SandboxBackend:
    if isinstance(backend, SandboxBackend):
        reason = backend.unavailable_reason()
        if reason:
            from composer_infra.sandbox.backend import BackendUnavailable

            raise BackendUnavailable(f"sandbox backend {backend.name!r} cannot run here: {reason}")
        return backend
    return (registry or default_registry()).get(backend)


def _restored_config(saved: dict[str, Any]) -> SandboxConfig:
    """The snapshot's config, with this worker's interpreters: where Python is installed
    is a property of the machine, not of the episode."""
    local = SandboxConfig().toolchain_paths
    return SandboxConfig.model_validate({**saved, "toolchain_paths": local})


def hidden_tests_dir(hidden_tests: Mapping[str, str]) -> str:
    """The one top-level folder that holds all of `hidden_tests` (e.g. `_grading`).

    One folder directly under the workspace, so emptying it before the tests go in
    never walks through a link the policy left in a parent (which could point out of
    the workspace).
    """
    folders = set()
    for path in hidden_tests:
        parts = PurePosixPath(path).parts
        if len(parts) < 2 or parts[0] in ("/", "..", "."):
            raise ValueError(
                f"hidden test {path!r} must be inside a folder of the workspace (e.g. "
                f"'_grading/{parts[-1] if parts else 'test_x.py'}'), not at its root"
            )
        folders.add(parts[0])
    if len(folders) != 1:
        raise ValueError(
            f"hidden tests must share one top-level folder, got {sorted(folders)}: "
            "put them all under one (e.g. '_grading/')"
        )
    return folders.pop()


class Sandbox:
    """One task's sandbox. Make it with `create`, `restore` or `fork`; `close` when done."""

    def __init__(
        self,
        *,
        task: Task,
        backend: SandboxBackend,
        config: SandboxConfig,
        home: Path,
        memory_image: Path | None = None,
        todos: TodoList | None = None,
        finished: bool = False,
        final_message: str | None = None,
    ) -> None:
        self.id = home.name
        self.task = task
        self.backend = backend
        self.config = config
        self.home = home
        self.workspace = home / "workspace"
        self.todos = todos or TodoList()
        self.finished = finished
        self.final_message = final_message
        self._lock = threading.RLock()
        state_dir = home / "state"
        state_dir.mkdir(exist_ok=True)
        self.runtime: Runtime = backend.start(
            self.workspace, config, state_dir=state_dir, memory_image=memory_image
        )
        self.fs = WorkspaceFS(self.workspace, owner=self.runtime.owner)
        self.closed = False

    # -- making sandboxes ------------------------------------------------------------

    @staticmethod
    def _new_home(work_dir: Path | None) -> Path:
        """A private (0700) directory for one sandbox under `work_dir`, which must exist.

        0700 because what a sandbox leaves (a set-id file, a planted link) must not be
        reachable by other users of the host, whatever `work_dir`'s own mode.
        """
        if work_dir is not None and not Path(work_dir).is_dir():
            raise FileNotFoundError(
                f"sandbox work_dir {work_dir} does not exist (or is not a directory); "
                "create it first, or pass work_dir=None for a private temporary one"
            )
        home = (work_dir or default_work_dir()) / f"sbx-{uuid.uuid4().hex[:12]}"
        home.mkdir(mode=0o700)
        os.chmod(home, 0o700)  # whatever the umask
        (home / "workspace").mkdir()
        return home

    @classmethod
    def create(
        cls,
        task: Task,
        backend: str | SandboxBackend | None = None,
        *,
        config: SandboxConfig | None = None,
        registry: BackendRegistry | None = None,
        work_dir: Path | None = None,
    ) -> Sandbox:
        """A fresh sandbox holding the task's files. `backend` defaults to bwrap."""
        chosen = _resolve_backend(backend, registry)
        config = config or SandboxConfig()
        home = cls._new_home(work_dir)
        fs = WorkspaceFS(home / "workspace")
        try:
            mount_workspace(home / "workspace", config.limits.workspace_bytes)
            for name, text in task.files.items():
                fs.write_bytes(name, text.encode())
            return cls(task=task, backend=chosen, config=config, home=home)
        except BaseException:
            _remove_quietly(home)
            raise

    def adopt(self, task: Task) -> None:
        """Give a pre-started (pool) sandbox its task: write the files, take the task's place.

        Only for a sandbox nothing has been done in yet (what `SandboxPool` hands out).
        """
        with self._lock:
            self._check_open()
            for name, text in task.files.items():
                self.fs.write_bytes(name, text.encode())
            self.task = task

    @classmethod
    def restore(
        cls,
        snapshot: Snapshot | str,
        store: SnapshotStore,
        *,
        backend: str | SandboxBackend | None = None,
        config: SandboxConfig | None = None,
        registry: BackendRegistry | None = None,
        work_dir: Path | None = None,
    ) -> Sandbox:
        """Bring a snapshot back, here or on another worker that shares `store`.

        The backend defaults to the one that took the snapshot; a memory image can
        only be restored by a backend with memory snapshots.
        """
        digest = snapshot.digest if isinstance(snapshot, Snapshot) else snapshot
        home = cls._new_home(work_dir)
        unpack = home / "unpack"
        try:
            state, workspace, memory = store.load(digest, unpack)
            config = config or _restored_config(state["config"])
            if mount_workspace(home / "workspace", config.limits.workspace_bytes):
                copy_tree(workspace, home / "workspace", exist_ok=True)
            else:
                (home / "workspace").rmdir()
                workspace.rename(home / "workspace")
            chosen = _resolve_backend(backend or state["backend"], registry)
            if memory is not None and not chosen.memory_snapshots:
                from composer_infra.sandbox.backend import BackendUnavailable

                raise BackendUnavailable(
                    f"snapshot {digest[:12]} holds a memory image of {state['backend']!r}; "
                    f"backend {chosen.name!r} cannot restore it (use one with memory snapshots)"
                )
            sandbox = cls(
                task=Task.model_validate(state["task"]),
                backend=chosen,
                config=config,
                home=home,
                memory_image=memory,
                todos=TodoList.model_validate(state["todos"]),
                finished=state["finished"],
                final_message=state["final_message"],
            )
        except BaseException:
            _remove_quietly(home)
            raise
        _remove_quietly(unpack)
        return sandbox

    def _state(self) -> dict[str, Any]:
        return {
            "backend": self.backend.name,
            "task": self.task.model_dump(mode="json"),
            "config": self.config.model_dump(mode="json"),
            "todos": self.todos.model_dump(mode="json"),
            "finished": self.finished,
            "final_message": self.final_message,
        }

    def snapshot(self, store: SnapshotStore) -> Snapshot:
        """Store the whole state (and running processes' memory, if the backend can)."""
        with self._lock:
            self._check_open()
            with tempfile.TemporaryDirectory(dir=self.home) as image:
                image_dir = Path(image)
                frozen = self.runtime.checkpoint(image_dir)
                try:
                    return store.put(self._state(), self.workspace, image_dir if frozen else None)
                finally:
                    if frozen:
                        self.runtime.resume(image_dir)

    def fork(self, *, work_dir: Path | None = None) -> Sandbox:
        """An independent copy that goes on from here (running processes too, on gvisor)."""
        with self._lock:
            self._check_open()
            home = self._new_home(work_dir or self.home.parent)
            image_dir = home / "image"
            image_dir.mkdir()
            try:
                mount_workspace(home / "workspace", self.config.limits.workspace_bytes)
                frozen = self.runtime.checkpoint(image_dir)
                try:
                    # Links stay links (never followed), FIFOs and sockets are made anew,
                    # set-id bits are cleared; any depth.
                    copy_tree(self.workspace, home / "workspace", exist_ok=True)
                finally:
                    if frozen:
                        self.runtime.resume(image_dir)
                return Sandbox(
                    task=self.task,
                    backend=self.backend,
                    config=self.config,
                    home=home,
                    memory_image=image_dir if frozen else None,
                    todos=self.todos.model_copy(deep=True),
                    finished=self.finished,
                    final_message=self.final_message,
                )
            except BaseException:
                _remove_quietly(home)
                raise
            finally:
                _remove_quietly(image_dir)

    # -- tools -----------------------------------------------------------------------

    def call(self, name: str, arguments: Any = None) -> ToolResult:
        """Run one tool call as the model wrote it. Never raises for a bad call."""
        if name not in TOOL_ARGS:
            return ToolResult.failure(
                f"unknown tool {name!r}; the tools are: {', '.join(TOOL_ARGS)}", malformed=True
            )
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return ToolResult.failure(
                f"arguments of {name} must be an object of named arguments, got {type(arguments).__name__}",
                malformed=True,
            )
        try:
            args = TOOL_ARGS[name].model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return ToolResult.failure(f"bad arguments for {name}: {problems}", malformed=True)
        with self._lock:
            if self.closed:
                return ToolResult.failure("this sandbox is closed")
            if self.finished:
                return ToolResult.failure("the episode is finished; no more tool calls")
            try:
                return getattr(self, f"_tool_{name}")(args)
            except PathError as exc:
                return ToolResult.failure(str(exc))
            except Exception as exc:
                # The sandbox itself broke (its container died, its disk vanished), or
                # something we did not foresee: the episode gets an error it can
                # report, the caller's loop goes on.
                log.exception("sandbox %s: %s failed", self.id, name)
                return ToolResult.failure(f"sandbox error: {type(exc).__name__}: {exc}")

    def read_file(self, path: str) -> ToolResult:
        return self.call("read_file", {"path": path})

    def write_file(self, path: str, content: str) -> ToolResult:
        return self.call("write_file", {"path": path, "content": content})

    def edit_file(self, path: str, old: str, new: str) -> ToolResult:
        return self.call("edit_file", {"path": path, "old": old, "new": new})

    def list_files(self, path: str = ".") -> ToolResult:
        return self.call("list_files", {"path": path})

    def run(self, command: str, timeout: float | None = None) -> ToolResult:
        return self.call("run", {"command": command, "timeout": timeout})

    def todo(self, action: str, item: str | None = None, id: int | None = None) -> ToolResult:
        return self.call("todo", {"action": action, "item": item, "id": id})

    def finish(self, message: str = "") -> ToolResult:
        return self.call("finish", {"message": message})

    def _read_text(self, path: str) -> str:
        data = self.fs.read_bytes(path, self.config.read_limit)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise PathError(f"{path!r} is not UTF-8 text") from None

    def _tool_read_file(self, args: ReadFileArgs) -> ToolResult:
        return ToolResult.success(self._read_text(args.path))

    def _tool_write_file(self, args: WriteFileArgs) -> ToolResult:
        data = args.content.encode()
        self.fs.write_bytes(args.path, data)
        return ToolResult.success(f"wrote {len(data)} bytes to {args.path}")

    def _tool_edit_file(self, args: EditFileArgs) -> ToolResult:
        text = self._read_text(args.path)
        count = text.count(args.old)
        if count == 0:
            return ToolResult.failure(
                f"`old` text was not found in {args.path}; read the file and copy it exactly"
            )
        if count > 1:
            return ToolResult.failure(
                f"`old` text occurs {count} times in {args.path}; include more lines so it is unique"
            )
        self.fs.write_bytes(args.path, text.replace(args.old, args.new, 1).encode())
        return ToolResult.success(f"edited {args.path}")

    def _tool_list_files(self, args: ListFilesArgs) -> ToolResult:
        entries, cut = self.fs.list_dir(args.path)
        text = "\n".join(entries) + ("\n[listing cut short]" if cut else "")
        return ToolResult.success(text, truncated=cut)

    def _tool_run(self, args: RunArgs) -> ToolResult:
        asked = self.config.command_timeout if args.timeout is None else args.timeout
        try:
            timeout = check_timeout(asked, self.config.max_command_timeout, "run")
        except ValueError as exc:
            return ToolResult.failure(str(exc), malformed=True)
        result = self.runtime.run(args.command, timeout=timeout)
        data = result.model_dump()
        del data["output"]
        if result.ok:
            return ToolResult(ok=True, output=result.output, data=data)
        if result.timed_out:
            error = f"timed out after {timeout:g}s"
        elif result.killed_for_output:
            error = "killed for writing too much output"
        else:
            error = f"exit code {result.exit_code}"
        return ToolResult(ok=False, output=result.output, error=error, data=data)

    def _tool_todo(self, args: TodoArgs) -> ToolResult:
        try:
            return ToolResult.success(self.todos.apply(args))
        except ValueError as exc:
            return ToolResult.failure(str(exc))

    def _tool_finish(self, args: FinishArgs) -> ToolResult:
        self.finished = True
        self.final_message = args.message
        return ToolResult.success("episode finished")

    # -- tests -------------------------------------------------------------------------

    def run_tests(
        self, timeout: float | None = None, *, hidden_tests: Mapping[str, str] | None = None
    ) -> TestReport:
        """Grade: the task's pytest command under the grader's runner; the verdict fails closed.

        Everything the policy's commands started is killed first (`Runtime.kill_all`, by
        pid namespace or cgroup). Then `hidden_tests` (workspace-relative path to text, all
        in one folder that is not the workspace root) are written into that folder emptied
        first, with the grader's runner and `workspace_probe.py` beside them (without
        hidden tests, in a fresh randomly named folder), so nothing the policy planted there
        (a `conftest.py`, a link, a process rewriting a file) is graded. The runner
        (`grading/runner.py`) runs pytest shut off from the workspace and writes the only
        report believed, signed with this grading's nonce, where the backend keeps other
        commands out (`Runtime.grade`). `build_report` fails closed on anything else (see
        `grading/verdict.py`): a command that is not pytest is graded failed without being
        run. `timeout` defaults to `max_command_timeout`; a timeout that is not a finite
        number of seconds in (0, max_command_timeout] is a ValueError.
        """
        limit = self.config.max_command_timeout
        timeout = limit if timeout is None else check_timeout(timeout, limit, "run_tests")
        tests_dir = hidden_tests_dir(hidden_tests) if hidden_tests else None
        command = parse_test_command(self.task.test_command)
        if isinstance(command, str):
            return refused(command)
        run = GradingRun(
            command=command,
            runner_dir=tests_dir or f".composer-grader-{uuid.uuid4().hex}",
            tests_dir=tests_dir,
        )
        with self._lock:
            self._check_open()
            self.runtime.kill_all()
            try:
                remove_tree(self.workspace / run.runner_dir)
                try:
                    for path, content in {**(hidden_tests or {}), **grader_files(run)}.items():
                        self.fs.write_bytes(path, content.encode())
                except (OSError, PathError) as exc:
                    # The policy filled the workspace (or made it unwritable): a failure of
                    # the episode, not of the infrastructure (which would drop it).
                    return refused(f"the grader could not write the hidden tests: {exc}")
                result, report = self.runtime.grade(run, timeout=timeout)
            finally:
                # The runner deleted the hidden tests after collection; what is left of
                # them (it never got that far) must not reach a later command either.
                remove_tree(self.workspace / run.runner_dir)
            return build_report(
                result,
                report,
                run,
                expected_tests=self.task.expected_tests,
                allowed_skips=self.task.allowed_skips,
                output_kill_limit=self.config.output_kill_limit,
            )

    # -- lifetime ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"sandbox {self.id} is closed")

    def start_background(self, command: str) -> None:
        """Start a long-running process (memory-level backends; see `Runtime`)."""
        with self._lock:
            self._check_open()
            self.runtime.start_background(command)

    def close(self, *, keep_files: bool = False) -> None:
        """Stop the sandbox and (unless `keep_files`) delete its directory."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                self.runtime.close()
            finally:
                if not keep_files and not _remove_quietly(self.home):
                    raise RuntimeError(f"sandbox {self.id}: could not delete {self.home}")

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
