"""The trained unit's packing: trajectories laid out as the tensors the RL loss reads.

The trained unit is composer-infra's `Trajectory` (`composer_infra.checkpoint`): one
sequence exactly as the inference engine produced it, token in and token out, recorded by
the episode runner, persisted in the group checkpoint and packed here, the one type from
the engine to the trainer. `PackedBatch` is only its tensor form.

`pack` lays a list of trajectories out as one packed row (documents never attend across
each other) with target-aligned tensors: entry ``t`` describes the prediction of token
``t + 1`` from position ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from composer_infra.checkpoint import Trajectory


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


def micro_batches(lengths: Sequence[int], budget: int | None) -> list[list[int]]:
    """The indices of `lengths` cut, in order, into runs of at most `budget` tokens each (a
    sequence longer than the budget is a run of its own); None: one run of them all.

    A step's forward and backward hold activations in proportion to the tokens packed into
    them (the logits alone are tokens x vocabulary floats), so an RL step of many long
    episodes is trained a micro-batch at a time with accumulated gradients."""
    if budget is None:
        return [list(range(len(lengths)))] if lengths else []
    if budget <= 0:
        raise ValueError(f"the micro-batch budget must be > 0 tokens (or None); got {budget}")
    runs: list[list[int]] = []
    tokens = 0
    for i, length in enumerate(lengths):
        if runs and tokens + length <= budget:
            runs[-1].append(i)
            tokens += length
        else:
            runs.append([i])
            tokens = length
    return runs


__all__ = ["PackedBatch", "micro_batches", "pack"]
