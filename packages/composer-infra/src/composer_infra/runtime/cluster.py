"""Start or join Ray, and run plain Python service classes as restartable actors.

Services are ordinary classes (unit tests construct them directly); `RayRuntime.spawn`
turns one into an actor with ``max_restarts`` so that a crashed process comes back with
a fresh instance (its constructor runs again; durable progress lives in checkpoints,
not in the actor's memory). Tasks are not retried by Ray itself (``max_task_retries=0``):
the caller decides what to run again. composer-rl's RL loop does it from its own state: a
restarted training service resumes from its last step checkpoint, and a resumed run
generates again every task it had drawn whose group never finished
(`composer_rl.rl.orchestrator`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

# Ray (>= 2.43) re-launches every worker through `uv run` (and uploads the working
# directory) when the driver runs under `uv run`. In a uv workspace that re-syncs the
# environment per worker and is slow; workers already get the driver's interpreter.
# Opt back in with RAY_ENABLE_UV_RUN_RUNTIME_ENV=1 or RuntimeConfig(propagate_uv_env=True).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray
from ray._private import ray_constants
from ray.actor import ActorHandle

from composer_infra.runtime.config import RuntimeConfig

log = logging.getLogger(__name__)

RAYLET_STARTUP_TIMEOUT = "timed out during startup"
"""What Ray says when a new node's raylet missed its fixed startup wait."""


def refresh_ray_auth_config() -> None:
    """Make this process's Ray read ``RAY_AUTH_MODE`` (and the token) from the environment again.

    Ray's C++ configuration reads the environment once, when ``ray`` is first imported,
    and keeps it: setting ``RAY_AUTH_MODE=token`` afterwards (a fixture, a CLI that
    learns the cluster's mode late) changes nothing, and joining a token-mode cluster
    then fails with ``InvalidAuthToken`` ("RAY_AUTH_MODE is currently 'disabled'").
    Ray itself re-reads it the same way when it turns token mode on for a new local
    instance. Only safe while this process is not connected (no ``ray.init`` active).
    """
    if ray.is_initialized():
        return
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


class ClusterAuthError(RuntimeError):
    """The cluster refused this process's authentication (not a transient connection error)."""


def _auth_error(error: BaseException) -> str | None:
    """Ray's authentication failure inside `error`, if that is what it is.

    ``ray.init`` wraps it twice (ConnectionError from a RuntimeError whose message holds
    the formatted ``AuthenticationError`` traceback), so look at types and messages.
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ray.exceptions.AuthenticationError) or "InvalidAuthToken" in str(seen):
            text = str(seen)
            start = text.find("InvalidAuthToken")
            return text[start:].split(". ")[0] if start >= 0 else text
        seen = seen.__cause__ or seen.__context__
    return None


class RayRuntime:
    """A Ray connection owned by this process: `start()`/`stop()` or use as a context manager."""

    def __init__(self, config: RuntimeConfig | None = None) -> None:
        self.config = config or RuntimeConfig()
        self._started_here = False

    def start(self) -> RayRuntime:
        if ray.is_initialized():
            raise RuntimeError(
                "Ray is already initialised in this process; stop it first or reuse that runtime"
            )
        cfg = self.config
        # The environment variable is read when ray is first imported; if someone imported
        # ray before us, apply the same choice to the constant ray.init consults.
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = cfg.propagate_uv_env
        # RAY_AUTH_MODE may have been set after `import ray`; the nodes a local instance
        # starts read it from the environment, so this process must agree with them.
        refresh_ray_auth_config()
        common: dict[str, Any] = {
            "namespace": cfg.namespace,
            "log_to_driver": cfg.log_to_driver,
            "logging_level": logging.WARNING,
        }
        if cfg.address is None:
            self._start_local(common)
        else:
            try:
                ray.init(address=cfg.address, **common)
            except Exception as error:
                auth = _auth_error(error)
                if auth is None:
                    raise
                mode = os.environ.get("RAY_AUTH_MODE", "unset (Ray's default: disabled)")
                raise ClusterAuthError(
                    f"the Ray cluster at {cfg.address} refused this process's credentials "
                    f"(RAY_AUTH_MODE here: {mode}). A cluster started with token "
                    "authentication needs RAY_AUTH_MODE=token in this process and the "
                    "cluster's token in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or "
                    f"RAY_AUTH_TOKEN; Ray said: {auth}"
                ) from error
        self._started_here = True
        return self

    def _start_local(self, common: dict[str, Any]) -> None:
        """Start a private instance; once more if its raylet missed Ray's startup wait.

        Ray gives a new node's raylet a fixed 30 s to register with the GCS. On a box whose
        cores are all busy (a training job beside the tests) it can take longer, and the
        instance is then half-started. That is the machine's load, not a fault in the run,
        so the instance is shut down and started once more before the error is raised."""
        cfg = self.config
        for attempt in (1, 2):
            try:
                # "local" always starts a private instance; None would join any cluster that
                # `ray start` left on this machine (or RAY_ADDRESS), never what we mean.
                ray.init(
                    address="local",
                    num_cpus=cfg.num_cpus,
                    object_store_memory=cfg.object_store_memory,
                    include_dashboard=False,
                    **common,
                )
                return
            except Exception as error:
                if attempt == 2 or RAYLET_STARTUP_TIMEOUT not in str(error):
                    raise
                log.warning("the local Ray instance did not start in time (%s); retrying", error)
                ray.shutdown()

    def stop(self) -> None:
        if self._started_here and ray.is_initialized():
            ray.shutdown()
        self._started_here = False

    def __enter__(self) -> RayRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spawn(
        self,
        service_class: type,
        *args: Any,
        name: str | None = None,
        num_cpus: float = 0,
        resources: dict[str, float] | None = None,
        max_restarts: int | None = None,
        max_concurrency: int | None = None,
        **kwargs: Any,
    ) -> ActorHandle:
        """Run `service_class(*args, **kwargs)` as an actor; calls go through ``.method.remote()``.

        `num_cpus` defaults to 0 because services mostly wait (on sandboxes, on the
        inference engine); give trainers and engines real CPU or GPU counts. `resources`
        pins a service to nodes that advertise a custom resource. `max_concurrency` makes
        a threaded actor that serves that many calls at once (a service whose calls wait on
        subprocesses, such as the environments'); the class must be thread-safe.
        """
        if not isinstance(service_class, type):
            raise TypeError(f"spawn() takes a plain class, got {service_class!r}")
        options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "max_restarts": self.config.max_restarts if max_restarts is None else max_restarts,
            "max_task_retries": 0,
        }
        if name is not None:
            options["name"] = name
        if resources:
            options["resources"] = resources
        if max_concurrency is not None:
            options["max_concurrency"] = max_concurrency
        remote_class: Any = ray.remote(service_class)
        return remote_class.options(**options).remote(*args, **kwargs)

    @staticmethod
    def alive_nodes() -> list[dict[str, Any]]:
        return [node for node in ray.nodes() if node.get("Alive")]
