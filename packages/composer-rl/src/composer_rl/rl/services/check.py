"""One real round through the four services: the check behind ``composer-rl services check``.

It answers "does the service layer work here, and where does each service run?" before a
long run is launched on a machine or a cluster: `run_check` starts training, inference,
environment and evaluation actors (a local Ray instance, or the cluster at `address`),
`run_round` drives one round through them (a train step publishes a new version,
inference syncs to it and stamps every token with it, the environment service runs a
built-in task's oracle solution against its tests in a sandbox, evaluation scores the
new version), and the report says where each ran and how long its part took. What it
started, it stops; a cluster it joined keeps running. The CLI only parses arguments and
prints the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import ray

from composer_infra.environment import EnvironmentConfig
from composer_model import ModelConfig
from composer_rl.rl.services._common import ModelSource
from composer_rl.rl.services.launch import Services, start_services
from composer_rl.rl.services.training import TrainingConfig

T = TypeVar("T")


class CheckFailed(RuntimeError):
    """One part of the round did not do what it must."""


def token_rows(vocab_size: int, rows: int, length: int, offset: int) -> list[list[int]]:
    """Learnable repeating patterns of ids 2..vocab-1 (0 and 1 are often special tokens)."""
    span = vocab_size - 2
    return [
        [2 + (offset + r * 7 + (i % (r + 2)) * 13) % span for i in range(length)]
        for r in range(rows)
    ]


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def run_round(
    services: Services,
    config: ModelConfig,
    results: dict[str, dict[str, Any]],
    *,
    max_new_tokens: int,
    timeout_s: float,
) -> None:
    """Train one step, follow it with inference and evaluation, grade a task.

    Fills `results` by actor name as each part succeeds (so a failure keeps the parts
    before it); raises `CheckFailed` when a part did not do what it must.
    """
    from composer_rl.agent.sandboxes import sandbox_task
    from composer_rl.tasks import BuiltinTaskSource, Split

    def get(ref: Any) -> Any:
        return ray.get(ref, timeout=timeout_s)

    vocab = config.vocab_size
    start_version = int(get(services.training.version.remote()))

    step, seconds = _timed(
        lambda: get(services.training.train_step.remote(token_rows(vocab, 4, 24, 0), wait=True))
    )
    version, loss = step.version, step.stats.loss
    if version != start_version + 1:
        raise CheckFailed(f"training: step published version {version}, not {start_version + 1}")
    results["training"] = {
        "seconds": seconds,
        "version": version,
        "loss": loss,
        "summary": f"step {step.step}: loss {loss:.3f}, published v{version}",
    }

    prompts = [row[:4] for row in token_rows(vocab, 2, 4, 5)]
    for i, actor in enumerate(services.inference):

        def sync_and_generate(actor: Any = actor) -> tuple[int | None, list[Any]]:
            held = get(actor.sync.remote())
            return held, get(actor.generate.remote(prompts, max_new_tokens=max_new_tokens, seed=0))

        (held, generated), seconds = _timed(sync_and_generate)
        stamps = sorted({v for g in generated for v in g.versions})
        tokens = sum(len(g.token_ids) for g in generated)
        if held != version or not tokens or stamps != [version]:
            raise CheckFailed(
                f"inference-{i}: synced to {held}, generated {tokens} tokens stamped with "
                f"versions {stamps}; expected v{version} on every token"
            )
        results[f"inference-{i}"] = {
            "seconds": seconds,
            "version": version,
            "tokens": tokens,
            "summary": f"synced to v{held}, {tokens} tokens, all stamped v{version}",
        }

    task = next(iter(BuiltinTaskSource().tasks(Split.TRAIN)))
    spec = sandbox_task(task, task.solved_files())

    def grade() -> Any:
        sandbox_id = get(services.environment.open.remote(spec))
        try:
            # The hidden tests go in as the grader writes them (with the probe and runner).
            return get(services.environment.run_tests.remote(sandbox_id, task.tests))
        finally:
            get(services.environment.close.remote(sandbox_id))

    report, seconds = _timed(grade)
    if not report.all_passed:
        raise CheckFailed(
            f"environment: the oracle solution of task {task.id} did not pass its tests in the "
            f"sandbox ({report.passed} passed, {report.failed} failed, {report.errors} errors, "
            f"exit {report.exit_code}):\n{report.output[-2000:]}"
        )
    results["environment"] = {
        "seconds": seconds,
        "task": task.id,
        "passed": report.passed,
        "summary": f"task {task.id}: {report.passed} passed, 0 failed in a sandbox",
    }

    scored, seconds = _timed(
        lambda: get(services.evaluation.evaluate.remote(token_rows(vocab, 2, 24, 11)))
    )
    if scored["version"] != version:
        raise CheckFailed(f"evaluation: scored v{scored['version']}, not the newest v{version}")
    results["evaluation"] = {
        "seconds": seconds,
        "version": version,
        "loss": scored["loss"],
        "summary": f"v{scored['version']}: held-out loss {scored['loss']:.3f}",
    }


def run_check(
    source: ModelSource,
    config: ModelConfig,
    run_dir: Path,
    *,
    address: str | None = None,
    store_url: str | None = None,
    placement: Mapping[str, Mapping[str, float]] | None = None,
    backend: str | None = None,
    threads: int = 1,
    max_new_tokens: int = 8,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Start the services, run one round, stop them; returns the report.

    The report has ``ok``, ``start_seconds``, ``nodes`` (alive Ray node ids), ``services``
    (by actor name: where it ran, and its part's results) and ``error`` when a part
    failed. Starting the services can raise (`ClusterAuthError`, `ConnectionError`,
    `ValueError`): then nothing was started and there is no report.
    """
    services, start_s = _timed(
        lambda: start_services(
            source,
            run_dir,
            address=address,
            store_url=store_url,
            training=TrainingConfig(threads=threads, checkpoint_every=0),
            environment=EnvironmentConfig(
                backend=backend, warm_sandboxes=0, work_dir=run_dir / "sandboxes"
            ),
            threads=threads,
            placement=placement,
        )
    )
    report: dict[str, Any] = {"address": address, "run_dir": str(run_dir)}
    results: dict[str, dict[str, Any]] = {}
    try:
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
        located = services.locations(timeout_s=timeout_s)
        report.update(start_seconds=start_s, nodes=nodes)
        try:
            run_round(services, config, results, max_new_tokens=max_new_tokens, timeout_s=timeout_s)
        except Exception as failure:  # a failed part is the check's answer, not a crash
            report["error"] = f"{type(failure).__name__}: {failure}"
        report["services"] = {
            name: {**place, **results.get(name, {})} for name, place in located.items()
        }
    finally:
        services.stop(timeout_s=timeout_s)
    report["ok"] = "error" not in report
    return report


__all__ = ["CheckFailed", "run_check", "run_round", "token_rows"]
