"""Pieces the RL tests share: a tiny 'stage-one checkpoint' (random weights, a tokenizer
trained on demonstrations), hand-made trajectories, and an endpoint no call may reach."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from composer_infra.checkpoint import Trajectory
from composer_rl.agent.quick import random_checkpoint as tiny_checkpoint
from composer_rl.rl.quick import QUICK_RL_SETTINGS


def trajectory(versions: list[int], advantage: float = 0.5) -> Trajectory:
    """One prompt token, then a sampled token per entry of `versions` (the version that
    sampled it); reward and advantage both `advantage`."""
    n = len(versions)
    return Trajectory(
        tokens=list(range(1, n + 2)),
        sampled=[False, *([True] * n)],
        logprobs=[0.0, *([-1.0] * n)],
        versions=[-1, *versions],
        reward=advantage,
        advantage=advantage,
    )


class Unused:
    """A service endpoint the code under test must not call (it raises if it does)."""

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future[Any]:
        raise AssertionError(f"{method} called")


__all__ = ["QUICK_RL_SETTINGS", "Unused", "tiny_checkpoint", "trajectory"]
