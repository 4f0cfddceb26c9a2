"""The Ray runtime on a local instance: services as actors, slots, crashes and kills."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from _runtime_services import EvaluationService, TokenRolloutService, expected_token

from composer_infra.runtime import RayRuntime, RuntimeConfig, SlotReconciler

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def runtime() -> Iterator[RayRuntime]:
    """One local Ray instance for this module; always shut down."""
    old = os.environ.get("PYTHONPATH")
    # Ray's worker processes inherit our environment; they must import the test services.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), old) if p)
    rt = RayRuntime(RuntimeConfig(num_cpus=2, max_restarts=3))
    try:
        yield rt.start()
    finally:
        rt.stop()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def test_plain_class_runs_directly_and_as_an_actor(runtime: RayRuntime) -> None:
    direct = EvaluationService()
    assert direct.score("4", "4") == 1.0 and direct.mean() == 1.0
    actor = runtime.spawn(EvaluationService)
    assert ray.get([actor.score.remote("4", " 4"), actor.score.remote("5", "4")]) == [1.0, 0.0]
    assert ray.get(actor.mean.remote()) == 0.5
    with pytest.raises(RuntimeError, match="already initialised"):
        RayRuntime().start()
    with pytest.raises(TypeError, match="plain class"):
        runtime.spawn(EvaluationService())  # type: ignore[arg-type]


def test_slots_stay_full_without_a_global_barrier(runtime: RayRuntime, tmp_path: Path) -> None:
    workers = [
        runtime.spawn(TokenRolloutService, f"w{i}", str(tmp_path / "r"), str(tmp_path / "m"))
        for i in range(3)
    ]
    gate = tmp_path / "release-the-slow-one"
    items = [("slow", {"prompt": 0, "length": 3, "wait_for": str(gate)})]
    items += [(f"fast-{i}", {"prompt": i + 1, "length": 3}) for i in range(6)]
    done: list[str] = []

    def on_result(item_id: str, result: dict[str, Any]) -> None:
        done.append(item_id)
        if len(done) == 6:  # every fast item went through the other slots meanwhile
            gate.touch()

    stats = SlotReconciler(workers, method="rollout", slots=3).run(items, on_result)
    assert done[-1] == "slow" and sorted(done[:-1]) == sorted(i for i, _ in items[1:])
    assert stats.max_in_flight == 3 and stats.completed == 7 and stats.retried == 0


@pytest.mark.slow
def test_killed_and_crashing_actors_lose_nothing(runtime: RayRuntime, tmp_path: Path) -> None:
    workers = [
        runtime.spawn(
            TokenRolloutService, f"w{i}", str(tmp_path / "rollouts"), str(tmp_path / "markers")
        )
        for i in range(3)
    ]
    length = 8
    items = [(f"item-{i}", {"prompt": i, "length": length, "delay": 0.01}) for i in range(8)]
    # Two items make their worker process exit hard (os._exit) partway through.
    items[2][1]["crash_at"] = 5
    items[6][1]["crash_at"] = 6
    results: dict[str, dict[str, Any]] = {}

    def on_result(item_id: str, result: dict[str, Any]) -> None:
        results[item_id] = result
        if len(results) == 3:
            ray.kill(workers[1], no_restart=False)  # and one is killed from outside

    stats = SlotReconciler(workers, method="rollout", slots=3).run(items, on_result)
    assert sorted(results) == sorted(i for i, _ in items)
    for item_id, payload in items:
        expected = [expected_token(int(payload["prompt"]), p) for p in range(length)]
        assert results[item_id]["tokens"] == expected, item_id
    # The crashed items resumed from their last rollout checkpoint, not from scratch (a
    # retry may itself be cut short by the outside kill, so later progress is fine too).
    assert results["item-2"]["resumed_from"] >= 5
    assert results["item-6"]["resumed_from"] >= 6
    assert stats.actor_failures >= 2 and stats.retried == stats.actor_failures
    # The killed and crashed actors came back (max_restarts) and still answer.
    for worker in workers:
        assert wait_until_answers(worker)["name"].startswith("w")


def wait_until_answers(worker: Any, timeout_s: float = 120) -> dict[str, Any]:
    """Call `where()` until the actor is past any restart it is going through."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(worker.where.remote(), timeout=timeout_s)
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
