"""The Ray runtime on a local instance: services as actors, crashes and kills."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from _runtime_services import EvaluationService, TokenRolloutService, expected_token

from composer_infra.runtime import RayRuntime, RuntimeConfig

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


@pytest.mark.slow
def test_crashed_and_killed_actors_come_back_fresh(runtime: RayRuntime, tmp_path: Path) -> None:
    """`spawn` gives an actor `max_restarts`: a hard crash or an outside kill costs the call
    in flight (Ray does not retry it: the caller decides), and the actor comes back with a
    fresh instance (its constructor ran again) that answers the same call."""
    worker = runtime.spawn(TokenRolloutService, "w0", str(tmp_path / "markers"))
    payload = {"prompt": 3, "length": 6, "crash_at": 4}
    expected = [expected_token(3, p) for p in range(6)]
    first = ray.get(worker.rollout.remote("warm-up", {"prompt": 3, "length": 6}))
    assert first["tokens"] == expected and first["calls"] == 1
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(worker.rollout.remote("item", payload))  # os._exit(1) partway through
    after_crash = wait_until_restarted(worker, first["pid"])
    again = ray.get(worker.rollout.remote("item", payload))  # it crashes only once
    assert again["tokens"] == expected and again["calls"] == 1  # a fresh instance
    ray.kill(worker, no_restart=False)
    assert wait_until_restarted(worker, after_crash["pid"])["name"] == "w0"


def wait_until_restarted(worker: Any, old_pid: int, timeout_s: float = 120) -> dict[str, Any]:
    """Call `where()` until a process other than `old_pid` answers (the restarted actor)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            where: dict[str, Any] = ray.get(worker.where.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:  # restarting, or the call died with the old one
            where = {"pid": old_pid}
        if where["pid"] != old_pid:
            return where
        if time.monotonic() > deadline:
            raise TimeoutError(f"the actor of pid {old_pid} did not come back in {timeout_s} s")
        time.sleep(0.5)
