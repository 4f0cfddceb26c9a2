"""Start the report's four services as Ray actors: training, inference, environments, evaluation.

One call places them on a `RayRuntime`: a private local Ray instance by default, or a
cluster joined through `address` (the CLI's ``--ray-address``). They meet through the
run directory: the trainer publishes weights to ``<run_dir>/weights`` (or `store_url`,
e.g. ``s3://...``) and checkpoints to ``<run_dir>/checkpoints``; inference and
evaluation subscribe to the same store.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle

from composer_infra.environment import EnvironmentConfig, EnvironmentService
from composer_infra.runtime import RayRuntime, RuntimeConfig
from composer_rl.services._common import ModelSource
from composer_rl.services.evaluation import EvaluationService
from composer_rl.services.inference import InferenceService
from composer_rl.services.training import TrainingConfig, TrainingService

SERVICE_NAMES = ("training", "inference", "environment", "evaluation")
"""The keys of `start_services(placement=...)` and `Services.locations()`."""


def _where(_service: object) -> dict[str, Any]:
    """Runs inside an actor (through ``__ray_call__``): the node and process it lives in."""
    context = ray.get_runtime_context()
    return {
        "node_id": context.get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


@dataclass
class Services:
    """Handles of the four actors (call ``.method.remote(...)``) and the runtime they run on."""

    runtime: RayRuntime
    training: ActorHandle
    inference: list[ActorHandle]
    environment: ActorHandle
    evaluation: ActorHandle
    store_url: str
    owns_runtime: bool = field(default=False, repr=False)

    def actors(self) -> dict[str, ActorHandle]:
        """Every actor by name: ``training``, ``inference-0``.., ``environment``, ``evaluation``."""
        named = {"training": self.training}
        named.update({f"inference-{i}": actor for i, actor in enumerate(self.inference)})
        named.update({"environment": self.environment, "evaluation": self.evaluation})
        return named

    def locations(self, timeout_s: float = 120.0) -> dict[str, dict[str, Any]]:
        """Where each actor runs: ``{"node_id", "node_ip", "host", "pid"}`` by actor name.

        Asked of the actor process itself, so it reports where the service really runs,
        not where the scheduler meant to put it.
        """
        actors = self.actors()
        found: list[dict[str, Any]] = ray.get(
            [actor.__ray_call__.remote(_where) for actor in actors.values()], timeout=timeout_s
        )
        return dict(zip(actors, found, strict=True))

    def stop(self, timeout_s: float = 60.0) -> None:
        """Close the services (publisher flushed, sandboxes removed), then Ray if we started it."""
        try:
            closing = [self.training.close.remote(), self.environment.shutdown.remote()]
            closing += [actor.close.remote() for actor in (*self.inference, self.evaluation)]
            ray.wait(closing, num_returns=len(closing), timeout=timeout_s)
        finally:
            if self.owns_runtime:
                self.runtime.stop()

    def __enter__(self) -> Services:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_placement(
    placement: Mapping[str, Mapping[str, float]], nodes: list[dict[str, Any]]
) -> None:
    offered = [node.get("Resources", {}) for node in nodes]
    for service, resources in placement.items():
        for name, amount in resources.items():
            if not any(node.get(name, 0) >= amount for node in offered):
                custom = sorted(
                    {
                        key
                        for node in offered
                        for key in node
                        if key not in ("CPU", "GPU", "memory", "object_store_memory")
                        and not key.startswith("node:")
                    }
                )
                raise ValueError(
                    f"placement of {service}: no live Ray node offers {amount} of resource "
                    f"{name!r} (custom resources in this cluster: {custom or 'none'}); start "
                    f"a node with `ray start --resources='{{\"{name}\": 1}}'` or change "
                    "the placement"
                )


def start_services(
    model: ModelSource,
    run_dir: str | Path,
    *,
    runtime: RayRuntime | None = None,
    address: str | None = None,
    store_url: str | None = None,
    training: TrainingConfig | None = None,
    environment: EnvironmentConfig | None = None,
    inference_replicas: int = 1,
    max_batch_size: int = 8,
    threads: int | None = None,
    placement: Mapping[str, Mapping[str, float]] | None = None,
    inference_options: Mapping[str, Any] | None = None,
) -> Services:
    """Spawn training, `inference_replicas` inference, environment and evaluation actors.

    Without `runtime`, one is started (local, or joining `address`) and `Services.stop`
    shuts it down (a joined cluster keeps running; only our connection and actors go).
    The training actor is created first and publishes version 0 before this returns, so
    the others can `sync` at once.

    `placement` pins services to nodes by Ray custom resources, e.g.
    ``{"training": {"trainer_node": 0.01}, "inference": {"gpu_box": 0.5}}``: a service
    is only scheduled on a node that advertises those resources (``ray start
    --resources``), and holds the amounts while it lives. Unnamed services go where Ray
    puts them. Keys are `SERVICE_NAMES`; every inference replica gets the same request.
    A resource that no live node offers in that amount is an error here rather than an
    actor that waits forever to be scheduled. `inference_options` are further keyword
    arguments of every `InferenceService` (e.g. ``follow_interval_s``, ``max_seq_len``).
    """
    if inference_replicas < 1:
        raise ValueError(f"inference_replicas must be >= 1, got {inference_replicas}")
    where = {name: dict(resources) for name, resources in (placement or {}).items()}
    unknown = sorted(set(where) - set(SERVICE_NAMES))
    if unknown:
        raise ValueError(f"placement names unknown service(s) {unknown}; use {list(SERVICE_NAMES)}")
    owns_runtime = runtime is None
    rt = runtime or RayRuntime(RuntimeConfig(address=address)).start()
    try:
        _check_placement(where, rt.alive_nodes())
        run = Path(run_dir).resolve()
        run.mkdir(parents=True, exist_ok=True)
        url = store_url or (run / "weights").as_uri()
        training_config = training or TrainingConfig(threads=threads)
        trainer = rt.spawn(
            TrainingService,
            model,
            url,
            str(run / "checkpoints"),
            training_config,
            resources=where.get("training"),
        )
        ray.get(trainer.version.remote())  # constructed: version 0 is in the store
        inference = [
            rt.spawn(
                InferenceService,
                model,
                url,
                max_batch_size=max_batch_size,
                threads=threads,
                resources=where.get("inference"),
                **dict(inference_options or {}),
            )
            for _ in range(inference_replicas)
        ]
        env_config = environment or EnvironmentConfig(work_dir=run / "sandboxes", warm_sandboxes=0)
        env = rt.spawn(EnvironmentService, env_config, resources=where.get("environment"))
        evaluation = rt.spawn(
            EvaluationService, model, url, threads=threads, resources=where.get("evaluation")
        )
    except BaseException:
        if owns_runtime:
            rt.stop()
        raise
    return Services(
        runtime=rt,
        training=trainer,
        inference=inference,
        environment=env,
        evaluation=evaluation,
        store_url=url,
        owns_runtime=owns_runtime,
    )
