"""Start or join Ray, and run plain Python service classes as restartable actors.

Services are ordinary classes (unit tests construct them directly); `RayRuntime.spawn`
turns one into an actor with ``max_restarts`` so that a crashed process comes back with
a fresh instance (its constructor runs again; durable progress lives in checkpoints,
not in the actor's memory). Tasks are not retried by Ray itself (``max_task_retries=0``):
the `SlotReconciler` decides what to resubmit, and the service resumes the work from
its last rollout checkpoint.
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
        common: dict[str, Any] = {
            "namespace": cfg.namespace,
            "log_to_driver": cfg.log_to_driver,
            "logging_level": logging.WARNING,
        }
        if cfg.address is None:
            # "local" always starts a private instance; None would join any cluster that
            # `ray start` left on this machine (or RAY_ADDRESS), which is never what we mean.
            ray.init(
                address="local",
                num_cpus=cfg.num_cpus,
                object_store_memory=cfg.object_store_memory,
                include_dashboard=False,
                **common,
            )
        else:
            ray.init(address=cfg.address, **common)
        self._started_here = True
        return self

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
        **kwargs: Any,
    ) -> ActorHandle:
        """Run `service_class(*args, **kwargs)` as an actor; calls go through ``.method.remote()``.

        `num_cpus` defaults to 0 because services mostly wait (on sandboxes, on the
        inference engine); give trainers and engines real CPU or GPU counts. `resources`
        pins a service to nodes that advertise a custom resource.
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
        remote_class: Any = ray.remote(service_class)
        return remote_class.options(**options).remote(*args, **kwargs)

    @staticmethod
    def alive_nodes() -> list[dict[str, Any]]:
        return [node for node in ray.nodes() if node.get("Alive")]
