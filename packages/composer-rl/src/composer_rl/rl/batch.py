"""The trained unit: sampled sequences with everything the RL loss needs, and their packing.

A `Trajectory` is one sequence exactly as the inference engine produced it, token in and
token out: the ids (prompt, the policy's tokens, the tool outputs appended between turns),
which of them the policy sampled, the behaviour log-probability and policy version of each
sampled token, and the experts every token was routed to at every MoE layer (for router
replay). Nothing is re-tokenized on the way to the trainer. A self-summarized episode is
several trajectories that share the episode's reward.

`pack` lays a list of trajectories out as one packed row (documents never attend across
each other) with target-aligned tensors: entry ``t`` describes the prediction of token
``t + 1`` from position ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Trajectory:
    """One sequence of an episode, with per-token sampling records.

    Persisted inside the group checkpoint (`composer_rl.rl.orchestrator.group_to_record`).
    """

    tokens: list[int]
    sampled: list[bool]
    logprobs: list[float]  # behaviour logprob per token (0.0 where not sampled)
    versions: list[int]  # policy version per token (-1 where not sampled)
    routing: list[list[list[int]]] | None = None  # [tokens][moe layers][top_k]
    reward: float | None = None
    advantage: float | None = None
    group_id: str = ""
    episode_id: str = ""
    segment: int = 0  # index within a self-summarized episode
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        lengths = {
            "sampled": len(self.sampled),
            "logprobs": len(self.logprobs),
            "versions": len(self.versions),
        }
        if self.routing is not None:
            lengths["routing"] = len(self.routing)
        wrong = {k: v for k, v in lengths.items() if v != n}
        if wrong:
            raise ValueError(f"trajectory of {n} tokens has per-token fields of lengths {wrong}")
        if self.sampled and self.sampled[0]:
            raise ValueError("the first token of a trajectory is context, never sampled")
        bad = [
            i
            for i, (s, v) in enumerate(zip(self.sampled, self.versions, strict=True))
            if s and v < 0
        ]
        if bad:
            raise ValueError(f"sampled tokens {bad[:5]} carry no policy version")

    @property
    def sampled_versions(self) -> list[int]:
        return [v for s, v in zip(self.sampled, self.versions, strict=True) if s]

    @property
    def num_sampled(self) -> int:
        return sum(self.sampled)

    def oldest_version(self) -> int | None:
        versions = self.sampled_versions
        return min(versions) if versions else None


@dataclass
class PackedBatch:
    """Target-aligned tensors of a packed row of trajectories."""

    input_ids: torch.Tensor  # [1, T]
    cu_seqlens: torch.Tensor  # [docs + 1] int32
    routing: torch.Tensor | None  # [T, moe layers, top_k] long
    target_mask: torch.Tensor  # [T] bool: the token at t + 1 was sampled by the policy
    behaviour_logp: torch.Tensor  # [T] float32, logprob of token t + 1 when sampled
    advantages: torch.Tensor  # [T] float32, the trajectory's advantage on its targets
    versions: torch.Tensor  # [T] long, version that sampled token t + 1 (-1 elsewhere)
    num_sequences: int

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def pack(trajectories: Sequence[Trajectory]) -> PackedBatch:
    """One packed row; every trajectory needs an advantage (drop the others before packing)."""
    if not trajectories:
        raise ValueError("cannot pack an empty batch of trajectories")
    ids: list[int] = []
    mask: list[bool] = []
    behaviour: list[float] = []
    advantages: list[float] = []
    versions: list[int] = []
    bounds = [0]
    routing_rows: list[list[list[int]]] = []
    with_routing = all(t.routing is not None for t in trajectories)
    for i, traj in enumerate(trajectories):
        if traj.advantage is None:
            raise ValueError(
                f"trajectory {i} ({traj.episode_id or 'unnamed'}) has no advantage; "
                "leave episodes without a reward out of the batch"
            )
        n = len(traj.tokens)
        if n < 2:
            raise ValueError(f"trajectory {i} has {n} token(s); it needs at least 2")
        ids += traj.tokens
        # Target t predicts token t + 1; the last position of a document predicts nothing.
        mask += [*traj.sampled[1:], False]
        behaviour += [*traj.logprobs[1:], 0.0]
        versions += [*traj.versions[1:], -1]
        advantages += [float(traj.advantage)] * n
        if with_routing and traj.routing is not None:
            routing_rows += traj.routing
        bounds.append(len(ids))
    return PackedBatch(
        input_ids=torch.tensor([ids], dtype=torch.long),
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32),
        routing=torch.tensor(routing_rows, dtype=torch.long) if with_routing else None,
        target_mask=torch.tensor(mask, dtype=torch.bool),
        behaviour_logp=torch.tensor(behaviour, dtype=torch.float32),
        advantages=torch.tensor(advantages, dtype=torch.float32),
        versions=torch.tensor(versions, dtype=torch.long),
        num_sequences=len(trajectories),
    )


__all__ = ["PackedBatch", "Trajectory", "pack"]
