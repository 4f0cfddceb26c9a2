"""The environment service as a Ray run uses it: the job's backends, grading beside the sandbox.

composer-infra's `EnvironmentService` owns the sandboxes; `JobEnvironmentService` is the same
with the job's backends and one method more, `grade`, which runs `grade_episode` next to the
sandbox (the hidden tests go no further than the service's process, and grading keeps its one
fail-closed implementation). `ServiceSandboxes` is the episode runner's side of it: the
`Sandboxes` whose handles forward every call to the service by sandbox id, so the inference
engine's process opens no sandbox and the environment actor can sit on another node (the
report's CPU regions against its GPU regions).
"""

from __future__ import annotations

import contextlib
from typing import Any

import ray
from ray.actor import ActorHandle

from composer_infra.environment import EnvironmentConfig, EnvironmentService
from composer_infra.sandbox import Snapshot, TestReport, ToolResult
from composer_rl.agent.sandboxes import grade_episode, sandbox_task
from composer_rl.plugins import JobPlugins
from composer_rl.tasks.model import Task


class JobEnvironmentService(EnvironmentService):
    """composer-infra's `EnvironmentService` with its backends from the job's plugins (the
    actor builds the job's manager from the pickled configuration; None: the defaults), and
    grading where the sandbox is."""

    def __init__(self, config: EnvironmentConfig, plugins: JobPlugins | None = None) -> None:
        job = plugins if plugins is not None else JobPlugins()
        super().__init__(config, registry=job.backends)

    def grade(self, sandbox_id: str, task: Task) -> tuple[TestReport, dict[str, str]]:
        """`grade_episode` on an open sandbox: the hidden tests' report, then the files left."""
        return grade_episode(self.sandbox(sandbox_id), task)


Service = ActorHandle | JobEnvironmentService
"""The service as an actor (a Ray run) or as the object itself (tests, one process)."""


def _invoke(service: Service, method: str, *args: Any) -> Any:
    if isinstance(service, ActorHandle):
        return ray.get(getattr(service, method).remote(*args))
    return getattr(service, method)(*args)


class ServiceSandbox:
    """A `SandboxHandle` on a sandbox of the environment service, by id."""

    def __init__(self, service: Service, sandbox_id: str) -> None:
        self.service = service
        self.sandbox_id = sandbox_id

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        # The service answers a broken sandbox with an error result; a service that is gone
        # (its node lost) must not end the episode loop either. A bug of ours still raises.
        try:
            result: ToolResult = _invoke(self.service, "call", self.sandbox_id, tool, arguments)
        except ray.exceptions.RayError as exc:
            return ToolResult.failure(f"environment service error: {type(exc).__name__}: {exc}")
        return result

    def grade(self, task: Task) -> tuple[TestReport, dict[str, str]]:
        graded: tuple[TestReport, dict[str, str]] = _invoke(
            self.service, "grade", self.sandbox_id, task
        )
        return graded

    def snapshot(self) -> Snapshot:
        snapshot: Snapshot = _invoke(self.service, "snapshot", self.sandbox_id)
        return snapshot

    def fork(self) -> ServiceSandbox:
        return ServiceSandbox(self.service, str(_invoke(self.service, "fork", self.sandbox_id)))

    def close(self) -> None:
        # A service that is gone took its sandboxes with it (a run stopping).
        with contextlib.suppress(ray.exceptions.RayActorError):
            _invoke(self.service, "close", self.sandbox_id)


class ServiceSandboxes:
    """`Sandboxes` in the environment service (picklable: an actor handle travels with it
    to the inference and evaluation actors)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def open(self, task: Task, backend: str | None = None) -> ServiceSandbox:
        sandbox_id = _invoke(self.service, "open", sandbox_task(task), backend)
        return ServiceSandbox(self.service, str(sandbox_id))

    def restore(self, snapshot: Snapshot | str) -> ServiceSandbox:
        """Restore in this service: a snapshot another service took into a shared store
        (`EnvironmentConfig.store_dir`) migrates the episode here."""
        return ServiceSandbox(self.service, str(_invoke(self.service, "restore", snapshot)))
