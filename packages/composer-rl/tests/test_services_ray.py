"""The four services as Ray actors on a private local Ray instance (started and always stopped)."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator

import pytest
import ray
import torch
from _services_support import VOCAB, micro_config, token_batch

from composer_infra.sandbox import Task, default_registry
from composer_model import OptimConfig
from composer_rl.rl.services import EnvironmentConfig, Services, TrainingConfig, start_services

BWRAP_MISSING = default_registry().backends()["bwrap"].unavailable_reason()

# Starting the four actors takes about 30 s of the module's 60 s (2 cores), so the whole
# module is `slow`: `nox -s tests` runs it, the Python-version matrix only imports it.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    torch.set_num_threads(1)
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # actor processes inherit it
    run_dir = tmp_path_factory.mktemp("services-run")
    env_config = EnvironmentConfig(
        backend="process" if BWRAP_MISSING else "bwrap",
        warm_sandboxes=0,
        work_dir=run_dir / "sandboxes",
    )
    started = start_services(
        micro_config(),
        run_dir,
        training=TrainingConfig(
            optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=0),
            checkpoint_every=1,
            threads=1,
        ),
        environment=env_config,
        threads=1,
    )
    try:
        assert started.owns_runtime and ray.is_initialized()
        yield started
    finally:
        started.stop()
        assert not ray.is_initialized()
        if old is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = old


def test_training_steps_reach_inference_and_evaluation(services: Services) -> None:
    trainer, inference = services.training, services.inference[0]
    assert ray.get(inference.sync.remote()) == 0  # the trainer published version 0 at start

    results = [ray.get(trainer.train_step.remote(token_batch(seed=0))) for _ in range(2)]
    assert [r.version for r in results] == [1, 2]
    assert all(math.isfinite(r.stats.loss) for r in results)
    assert ray.get(trainer.flush.remote()) == 2

    assert ray.get(inference.sync.remote()) == 2
    assert ray.get(inference.version.remote()) == 2
    generated = ray.get(
        inference.generate.remote([[3, 4, 5], [7]], max_new_tokens=6, seed=0, return_routing=True)
    )
    for result in generated:
        assert result.token_ids and result.versions == [2] * len(result.token_ids)
        assert len(result.logprobs) == len(result.token_ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in result.logprobs)
        assert all(0 <= t < VOCAB for t in result.token_ids)
        assert result.routing is not None

    report = ray.get(services.evaluation.evaluate.remote(token_batch(seed=42, rows=2)))
    assert report["version"] == 2 and math.isfinite(report["loss"]) and report["loss"] > 0


def test_environment_service_runs_a_command_in_a_sandbox(services: Services) -> None:
    if BWRAP_MISSING:
        pytest.skip(f"bwrap cannot run here: {BWRAP_MISSING}")
    env = services.environment
    task = Task(instruction="say hi", files={"hello.txt": "hi from the workspace\n"})
    sandbox_id = ray.get(env.open.remote(task))
    try:
        result = ray.get(
            env.call.remote(sandbox_id, "run", {"command": "cat hello.txt", "timeout": 60})
        )
        assert result.ok, result.error
        assert "hi from the workspace" in result.output
        # Isolation holds through the actor: the host's run directory is not visible.
        leak = ray.get(env.call.remote(sandbox_id, "read_file", {"path": "../../etc/passwd"}))
        assert not leak.ok
    finally:
        ray.get(env.close.remote(sandbox_id))


def test_a_killed_trainer_restarts_from_its_checkpoint(services: Services) -> None:
    trainer = services.training
    version = ray.get(trainer.flush.remote())  # checkpoint_every=1: this version is on disk
    pid = ray.get(trainer.__ray_call__.remote(lambda self: os.getpid()))
    ray.kill(trainer, no_restart=False)  # asynchronous: the old process may answer once more
    deadline = time.monotonic() + 120
    new_pid = pid
    while new_pid == pid:  # calls fail (or reach the dying process) until Ray restarts it
        assert time.monotonic() < deadline, "the killed trainer did not come back"
        with contextlib.suppress(ray.exceptions.RayActorError):
            new_pid = ray.get(trainer.__ray_call__.remote(lambda self: os.getpid()))
        if new_pid == pid:
            time.sleep(0.5)
    # Resumed from the checkpoint (not reset to 0); the restored weights are published
    # under the next unused version number.
    assert ray.get(trainer.version.remote()) == version + 1
    step = ray.get(trainer.train_step.remote(token_batch(seed=5), wait=True))
    assert step.version == version + 2
    assert ray.get(services.inference[0].sync.remote()) == version + 2
