"""RL settings sized for a random tiny policy: what `--quick` modes and tests run.

The policy itself is `composer_rl.agent.quick.random_checkpoint` (a stage-one-shaped
checkpoint with random weights, in seconds), so a quick run shows that the RL pipeline runs
and what it costs, never that anything learned.
"""

from __future__ import annotations

QUICK_RL_SETTINGS: dict[str, object] = {
    "tasks.per_template": 2,
    "rollout.max_turns": 2,
    "rollout.max_new_tokens": 32,
    "rollout.max_seq_len": 512,
    "loop.drop_constant_groups": False,
}
"""RL settings small enough for a quick run on `composer_rl.agent.quick.random_checkpoint`."""

__all__ = ["QUICK_RL_SETTINGS"]
