"""Start the report's four services as Ray actors: training, inference, environments, evaluation.

One call places them on a `RayRuntime`: a private local Ray instance by default, or a
cluster joined through `address` (the CLI's ``--ray-address``). They meet through the
run directory: the trainer publishes weights to ``<run_dir>/weights`` (or `store_url`,
e.g. ``s3://...``) and checkpoints to ``<run_dir>/checkpoints``; inference and
evaluation subscribe to the same store.
"""

from __future__ import annotations

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
    training_resources: dict[str, Any] | None = None,
) -> Services:
    """Spawn training, `inference_replicas` inference, environment and evaluation actors.

    Without `runtime`, one is started (local, or joining `address`) and `Services.stop`
    shuts it down. The training actor is created first and publishes version 0 before
    this returns, so the others can `sync` at once.
    """
    if inference_replicas < 1:
        raise ValueError(f"inference_replicas must be >= 1, got {inference_replicas}")
    owns_runtime = runtime is None
    rt = runtime or RayRuntime(RuntimeConfig(address=address)).start()
    try:
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
            name=None,
            resources=training_resources,
        )
        ray.get(trainer.version.remote())  # constructed: version 0 is in the store
        inference = [
            rt.spawn(InferenceService, model, url, max_batch_size=max_batch_size, threads=threads)
            for _ in range(inference_replicas)
        ]
        env_config = environment or EnvironmentConfig(work_dir=run / "sandboxes", warm_sandboxes=0)
        env = rt.spawn(EnvironmentService, env_config)
        evaluation = rt.spawn(EvaluationService, model, url, threads=threads)
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
