"""Start the report's four services as Ray actors: training, inference, environments, evaluation.

One call places them on a `RayRuntime`: a private local Ray instance by default, or a
cluster joined through `address` (the CLI's ``--ray-address``). They meet through the
run directory: the trainer publishes weights to ``<run_dir>/weights`` (or `store_url`,
e.g. ``s3://...``) and checkpoints to ``<run_dir>/checkpoints``; inference and
evaluation subscribe to the same store. Episodes (the inference and evaluation actors'
runners) open, call, grade and close their sandboxes through the environment actor
(`ServiceSandboxes`), so sandboxes live wherever that actor is placed.

A data-, context- or expert-parallel trainer (`TrainingConfig.parallel` with dp x cp > 1) is
one `TrainingRank` actor a rank: rank 0 picks the rendezvous address (loopback when every
rank is on its node, else its node's IP) and a free port, every rank joins one process
group there (gloo; NCCL when the actor sees a GPU) and then builds the `TrainingService`.
`Services.training` is rank 0 (it publishes); `Services.training_ranks` all of them, which
must all get every `train_rl` / `train_step` / `save_checkpoint` / `export` call in the same
order (`composer_rl.rl.run.RankGroupEndpoint` does that).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import torch.distributed as dist
from ray.actor import ActorHandle

from composer_infra.environment import EnvironmentConfig
from composer_infra.runtime import RayRuntime, RuntimeConfig
from composer_rl.plugins import JobPlugins
from composer_rl.rl.services._common import ModelSource
from composer_rl.rl.services.environment import JobEnvironmentService, ServiceSandboxes
from composer_rl.rl.services.evaluation import EvaluationService
from composer_rl.rl.services.inference import InferenceService
from composer_rl.rl.services.training import TrainingConfig, TrainingService

LOOPBACK = "127.0.0.1"

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


class TrainingRank(TrainingService):
    """One rank of a parallel training service, as a Ray actor.

    Built in two calls because the ranks must meet first: the constructor only records the
    rank; `rendezvous` (rank 0) names the address, and `join` (every rank, concurrently)
    joins the process group there and only then runs `TrainingService.__init__`, whose
    parallelization and first publish are collective. After `join` it is the service."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    def node(self) -> str:
        """The Ray node this rank runs on (rank 0 picks loopback when all share one)."""
        return str(ray.get_runtime_context().get_node_id())

    def rendezvous(self, loopback: bool) -> str:
        """``host:port`` for the process group's TCP store, a port free on this node now."""
        host = LOOPBACK if loopback else ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        return f"{host}:{port}"

    def join(
        self,
        address: str,
        model: ModelSource,
        store_url: str,
        checkpoint_dir: str,
        config: TrainingConfig,
        plugins: JobPlugins | None = None,
    ) -> int:
        """Join the group at `address`, then become the training service; its version."""
        # gloo on any machine: the training service keeps its model and gradients in host
        # memory, and NCCL (what a GPU machine chose here before) cannot reduce CPU tensors.
        dist.init_process_group(
            "gloo", init_method=f"tcp://{address}", rank=self.rank, world_size=self.world_size
        )
        TrainingService.__init__(self, model, store_url, checkpoint_dir, config, plugins=plugins)
        return self.policy_version

    def close(self) -> None:
        if hasattr(self, "publisher"):  # joined (a failed join built no service)
            super().close()
        if dist.is_initialized():
            dist.destroy_process_group()


def _spawn_training_ranks(
    rt: RayRuntime,
    model: ModelSource,
    store_url: str,
    checkpoint_dir: str,
    config: TrainingConfig,
    resources: dict[str, float] | None,
    plugins: JobPlugins | None = None,
) -> list[ActorHandle]:
    """dp x cp `TrainingRank` actors joined in one process group, services built."""
    world = config.parallel.world_size
    ranks = [rt.spawn(TrainingRank, rank, world, resources=resources) for rank in range(world)]
    nodes: list[str] = ray.get([rank.node.remote() for rank in ranks])
    address = str(ray.get([ranks[0].rendezvous.remote(len(set(nodes)) == 1)])[0])
    ray.get(
        [
            rank.join.remote(address, model, store_url, checkpoint_dir, config, plugins)
            for rank in ranks
        ]
    )
    return ranks


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
    training_ranks: list[ActorHandle] = field(default_factory=list)
    """Every rank of a parallel trainer (rank 0 is `training`); empty for one process."""

    def actors(self) -> dict[str, ActorHandle]:
        """Every actor by name: ``training`` (and ``training-1``.. for the other ranks of a
        parallel trainer), ``inference-0``.., ``environment``, ``evaluation``."""
        named = {"training": self.training}
        named.update({f"training-{i}": actor for i, actor in enumerate(self.training_ranks) if i})
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
            trainers = self.training_ranks or [self.training]
            closing = [actor.close.remote() for actor in trainers]
            closing.append(self.environment.shutdown.remote())
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
    plugins: JobPlugins | None = None,
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

    `plugins` are the job's (`JobPlugins`): every actor gets them, pickled as the job's
    plugin configuration, and builds its one manager from it, where the weight store and the
    sandbox backends are looked up. Without them each actor is a job of its own with the
    default configuration.
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
        ranks: list[ActorHandle] = []
        if training_config.parallel.world_size > 1:
            ranks = _spawn_training_ranks(
                rt,
                model,
                url,
                str(run / "checkpoints"),
                training_config,
                where.get("training"),
                plugins,
            )
            trainer = ranks[0]
        else:
            trainer = rt.spawn(
                TrainingService,
                model,
                url,
                str(run / "checkpoints"),
                training_config,
                plugins=plugins,
                resources=where.get("training"),
            )
        ray.get(trainer.version.remote())  # constructed: version 0 is in the store
        env_config = environment or EnvironmentConfig(work_dir=run / "sandboxes", warm_sandboxes=0)
        # Threaded: one episode's slow tool call or grading must not queue every other's.
        env = rt.spawn(
            JobEnvironmentService,
            env_config,
            plugins=plugins,
            resources=where.get("environment"),
            max_concurrency=env_config.max_concurrency,
        )
        sandboxes = ServiceSandboxes(env)
        inference = [
            rt.spawn(
                InferenceService,
                model,
                url,
                max_batch_size=max_batch_size,
                threads=threads,
                plugins=plugins,
                sandboxes=sandboxes,
                resources=where.get("inference"),
                **dict(inference_options or {}),
            )
            for _ in range(inference_replicas)
        ]
        evaluation = rt.spawn(
            EvaluationService,
            model,
            url,
            threads=threads,
            plugins=plugins,
            sandboxes=sandboxes,
            resources=where.get("evaluation"),
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
        training_ranks=ranks,
    )
