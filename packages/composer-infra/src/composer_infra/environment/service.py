"""The environments service of the report: sandboxes for many episodes at once.

A plain class (the orchestrator runs it as a Ray actor, on whichever node holds the
sandboxes: the report's CPU regions, apart from inference). Episodes are addressed by
sandbox id, so nothing but ids, tool calls and results crosses to the episode's process;
tool calls of different sandboxes run concurrently (on a thread pool here, or on the
actor's threads), a sandbox serialises its own calls, and nothing a call does raises into
the caller: an unknown sandbox or a broken one comes back as an error result.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_infra.environment.pool import SandboxPool
from composer_infra.sandbox import (
    BackendRegistry,
    Sandbox,
    SandboxConfig,
    Snapshot,
    SnapshotStore,
    Task,
    TestReport,
    ToolResult,
    default_registry,
)
from composer_infra.sandbox.tree import remove_tree

log = logging.getLogger(__name__)


class ShutdownError(RuntimeError):
    """`EnvironmentService.shutdown` closed what it could; the message names the rest."""


class EnvironmentConfig(BaseModel):
    """Which backend, how many warm sandboxes, how many calls at once, where state goes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str | None = Field(default=None, description="Backend name; None means bwrap.")
    warm_sandboxes: int = Field(default=4, ge=0)
    max_concurrency: int = Field(default=8, ge=1)
    work_dir: Path | None = Field(default=None, description="Where workspaces live (run dir).")
    store_dir: Path | None = Field(
        default=None, description="Snapshot store; share it between workers to migrate."
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)


class ToolCallRequest(BaseModel):
    """One tool call of one episode, for `EnvironmentService.call_many`."""

    sandbox_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class EnvironmentService:
    """Sandboxes by id, a warm pool, concurrent tool calls, snapshots through a store."""

    def __init__(
        self, config: EnvironmentConfig | None = None, *, registry: BackendRegistry | None = None
    ) -> None:
        self.config = config or EnvironmentConfig()
        self.registry = registry or default_registry()
        self.backend = self.registry.get(self.config.backend)
        self._own_work_dir = self.config.work_dir is None
        self.work_dir = self.config.work_dir or Path(tempfile.mkdtemp(prefix="composer-env-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.store = SnapshotStore(self.config.store_dir or self.work_dir / "snapshots")
        self.executor = ThreadPoolExecutor(
            max_workers=self.config.max_concurrency, thread_name_prefix="composer-env"
        )
        self._sandboxes: dict[str, Sandbox] = {}
        self._lock = threading.Lock()
        self._counts = {"opened": 0, "calls": 0, "closed": 0}
        self.pool = SandboxPool(
            self.backend,
            self.config.sandbox,
            size=self.config.warm_sandboxes,
            work_dir=self.work_dir,
            executor=self.executor,
        )

    # -- episodes ------------------------------------------------------------------------

    def _add(self, sandbox: Sandbox) -> str:
        with self._lock:
            self._sandboxes[sandbox.id] = sandbox
            self._counts["opened"] += 1
        return sandbox.id

    def _get(self, sandbox_id: str) -> Sandbox:
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            raise KeyError(f"no open sandbox {sandbox_id!r} in this environment service")
        return sandbox

    def open(self, task: Task, backend: str | None = None) -> str:
        """Start an episode's sandbox; returns its id.

        `backend` (looked up in this service's registry) is for a caller whose episodes
        name their own backend; None, or the service's own, takes one from the warm pool.
        """
        if backend is None or backend == self.backend.name:
            return self._add(self.pool.acquire(task))
        return self._add(
            Sandbox.create(
                task,
                self.registry.get(backend),
                config=self.config.sandbox,
                work_dir=self.work_dir,
            )
        )

    def sandbox(self, sandbox_id: str) -> Sandbox:
        return self._get(sandbox_id)

    def call(self, sandbox_id: str, tool: str, arguments: Any = None) -> ToolResult:
        """One tool call. Never raises: an unknown id or a failing backend is an error result."""
        with self._lock:
            self._counts["calls"] += 1
        try:
            sandbox = self._get(sandbox_id)
        except KeyError as exc:
            return ToolResult.failure(str(exc.args[0]))
        try:
            return sandbox.call(tool, arguments)
        except Exception as exc:  # a backend failure must not end the caller's loop
            log.exception("sandbox %s failed on %s", sandbox_id, tool)
            return ToolResult.failure(f"sandbox error: {type(exc).__name__}: {exc}")

    def call_many(self, calls: Sequence[ToolCallRequest]) -> list[ToolResult]:
        """Many episodes' tool calls at once, results in the order of `calls`."""
        futures = [
            self.executor.submit(self.call, c.sandbox_id, c.tool, c.arguments) for c in calls
        ]
        return [f.result() for f in futures]

    def run_tests(
        self, sandbox_id: str, hidden_tests: Mapping[str, str] | None = None
    ) -> TestReport:
        """`Sandbox.run_tests`: hidden tests go in only after the policy's processes end."""
        return self._get(sandbox_id).run_tests(hidden_tests=hidden_tests)

    def snapshot(self, sandbox_id: str) -> Snapshot:
        return self._get(sandbox_id).snapshot(self.store)

    def fork(self, sandbox_id: str) -> str:
        return self._add(self._get(sandbox_id).fork(work_dir=self.work_dir))

    def restore(self, snapshot: Snapshot | str) -> str:
        """Bring back a snapshot from the store (taken here or by another worker)."""
        return self._add(
            Sandbox.restore(snapshot, self.store, registry=self.registry, work_dir=self.work_dir)
        )

    def close(self, sandbox_id: str) -> None:
        with self._lock:
            sandbox = self._sandboxes.pop(sandbox_id, None)
            if sandbox is not None:
                self._counts["closed"] += 1
        if sandbox is not None:
            sandbox.close()

    @property
    def open_sandboxes(self) -> list[str]:
        with self._lock:
            return list(self._sandboxes)

    def stats(self) -> dict[str, Any]:
        """Sandboxes opened (forks and restores too) and closed, tool calls served, the
        ids open now and the work directory: what shows, from outside the service's
        process, that episodes' sandboxes lived here."""
        with self._lock:
            return {**self._counts, "open": list(self._sandboxes), "work_dir": str(self.work_dir)}

    def shutdown(self) -> None:
        """Close every sandbox and the pool; delete the work directory if we made it.

        Everything that can be closed is closed, whatever fails on the way; then, if
        anything could not be, one `ShutdownError` names each failure.
        """
        failures: list[str] = []

        def attempt(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as exc:
                log.exception("shutdown: %s failed", what)
                failures.append(f"{what}: {type(exc).__name__}: {exc}")

        attempt("closing the warm pool", self.pool.close)
        attempt("stopping the thread pool", lambda: self.executor.shutdown(wait=True))
        # Sandboxes the pool finished starting during shutdown.
        attempt("closing the warm pool again", self.pool.close)
        with self._lock:
            sandboxes, self._sandboxes = dict(self._sandboxes), {}
        for sandbox_id, sandbox in sandboxes.items():
            attempt(f"closing sandbox {sandbox_id}", sandbox.close)
        if self._own_work_dir:
            attempt(f"deleting {self.work_dir}", lambda: remove_tree(self.work_dir))
        if failures:
            raise ShutdownError(
                f"{len(failures)} part(s) of the environment service could not be closed: "
                + "; ".join(failures)
            )

    def __enter__(self) -> EnvironmentService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
