"""Global sequence packing: balance a global batch's compute over DP ranks, then micro-batch.

Compute of one sequence of L tokens is modelled as `a * L + L**2`: the linear part
(projections, experts, the LM head: the same cost for every token) plus causal attention
(L^2 / 2 query-key pairs, folded into `a`). `attention_cost_ratio(config)` derives `a` from
a model configuration, so the balance tracks the model: for the tiny preset attention is a
large share at a few thousand tokens, for Kimi K2 the linear part dominates far longer.

Balancing is multiway Karmarkar-Karp (the largest differencing method): repeatedly merge
the two partial partitions with the largest spread, pairing the heaviest subset of one
with the lightest of the other. It beats greedy longest-first on heavy-tailed lengths and
costs O(m log m * n) for m sequences and n ranks. Greedy and round-robin are here to
compare against (`benchmarks/packing_imbalance.py`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from composer_model.config import ModelConfig


def attention_cost_ratio(config: ModelConfig) -> float:
    """`a` in a*L + L^2: twice the per-token linear FLOPs over the FLOPs of one q-k pair.

    Linear: 2 x the active parameters a token touches (one multiply-add each). Attention
    per (query, key) pair and layer: 2 x heads x (attention_qk_dim + v_head_dim). Causal
    attention has L^2/2 pairs, so cost ∝ (2 lin / pair) L + L^2.
    """
    hidden, heads = config.hidden_size, config.num_attention_heads
    attn_params = config.attention_parameters(norms=False)
    dense_ffn = 3 * hidden * config.intermediate_size
    moe_ffn = (
        3
        * hidden
        * config.moe_intermediate_size
        * (config.num_experts_per_tok + config.n_shared_experts)
        + hidden * config.n_routed_experts
    )
    layers = config.num_hidden_layers
    moe_layers = config.num_moe_layers
    active = layers * attn_params + (layers - moe_layers) * dense_ffn + moe_layers * moe_ffn
    active += hidden * config.vocab_size  # LM head
    linear = 2 * active
    pair = 2 * layers * heads * (config.attention_qk_dim + config.v_head_dim)
    return 2 * linear / pair


def sequence_cost(length: int, a: float) -> float:
    return a * length + length * length


def _check(costs: Sequence[float], parts: int) -> None:
    if parts < 1:
        raise ValueError(f"the number of parts must be >= 1; got {parts}")
    if any(c < 0 for c in costs):
        raise ValueError("costs must be non-negative")


def karmarkar_karp(costs: Sequence[float], parts: int) -> list[list[int]]:
    """Indices of `costs` split into `parts` groups of near-equal sums (largest differencing)."""
    _check(costs, parts)
    tie = itertools.count()
    heap: list[tuple[float, int, list[float], list[list[int]]]] = []
    for i, c in enumerate(costs):
        sums = [float(c)] + [0.0] * (parts - 1)
        subsets = [[i]] + [[] for _ in range(parts - 1)]
        heapq.heappush(heap, (-float(c), next(tie), sums, subsets))
    if not heap:
        return [[] for _ in range(parts)]
    while len(heap) > 1:
        _, _, sums_a, sets_a = heapq.heappop(heap)
        _, _, sums_b, sets_b = heapq.heappop(heap)
        # both are sorted heaviest first: pair A's heaviest with B's lightest
        merged = sorted(
            (
                (sums_a[i] + sums_b[parts - 1 - i], sets_a[i] + sets_b[parts - 1 - i])
                for i in range(parts)
            ),
            key=lambda pair: -pair[0],
        )
        sums = [s for s, _ in merged]
        heapq.heappush(heap, (-(sums[0] - sums[-1]), next(tie), sums, [g for _, g in merged]))
    return [sorted(group) for group in heap[0][3]]


def greedy(costs: Sequence[float], parts: int) -> list[list[int]]:
    """Longest-processing-time first: each sequence, heaviest first, to the lightest part."""
    _check(costs, parts)
    loads = [(0.0, p) for p in range(parts)]
    groups: list[list[int]] = [[] for _ in range(parts)]
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        load, p = heapq.heappop(loads)
        groups[p].append(i)
        heapq.heappush(loads, (load + costs[i], p))
    return [sorted(g) for g in groups]


def round_robin(costs: Sequence[float], parts: int) -> list[list[int]]:
    """Sequence i to part i mod n: the naive baseline."""
    _check(costs, parts)
    return [list(range(p, len(costs), parts)) for p in range(parts)]


def imbalance(costs: Sequence[float], groups: Sequence[Sequence[int]]) -> float:
    """max / mean of the groups' total cost (1.0 is perfect balance)."""
    loads = [sum(costs[i] for i in g) for g in groups]
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


@dataclass
class MicroBatch:
    """Sequences packed into one row: which sequences, and their boundaries."""

    sequences: list[int]  # indices into the global batch
    cu_seqlens: torch.Tensor  # int32 [len(sequences) + 1]

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])


def plan_global_batch(
    lengths: Sequence[int], dp: int, a: float, max_tokens: int | None = None
) -> list[list[MicroBatch]]:
    """Per DP rank, its micro-batches: balanced compute across ranks, same count on every rank.

    Sequences are split over the `dp` ranks by Karmarkar-Karp on a*L + L^2. Each rank's
    share is then cut into `m` micro-batches, `m = max over ranks of ceil(tokens /
    max_tokens)` (None: one micro-batch), balanced by Karmarkar-Karp on tokens, so every
    rank runs the same number of forward/backward passes (their collectives must line up).
    Balanced bins hold about tokens/m each; one may exceed `max_tokens` by less than its
    largest sequence (a soft limit, not a bin-packing guarantee).
    """
    if any(n < 1 for n in lengths):
        raise ValueError("every sequence must have at least one token")
    if max_tokens is not None and max(lengths, default=0) > max_tokens:
        raise ValueError(
            f"a sequence of {max(lengths)} tokens exceeds max_tokens={max_tokens}; raise max_tokens or "
            "truncate the sequence"
        )
    if len(lengths) < dp:
        raise ValueError(f"{len(lengths)} sequences cannot give each of dp={dp} ranks one")
    shares = karmarkar_karp([sequence_cost(n, a) for n in lengths], dp)
    tokens = [sum(lengths[i] for i in share) for share in shares]
    micro = 1 if max_tokens is None else max(-(-t // max_tokens) for t in tokens)
    if micro > min(len(share) for share in shares):
        raise ValueError(
            f"{micro} micro-batches a rank are needed for max_tokens={max_tokens}, but a rank has only "
            f"{min(len(s) for s in shares)} sequences; raise max_tokens or the batch size"
        )
    plan = []
    for share in shares:
        bins = karmarkar_karp([float(lengths[i]) for i in share], micro)
        batches = []
        for b in bins:
            seqs = [share[j] for j in b]
            cu = torch.tensor([0, *[lengths[i] for i in seqs]], dtype=torch.int64).cumsum(0)
            batches.append(MicroBatch(sequences=seqs, cu_seqlens=cu.to(torch.int32)))
        plan.append(batches)
    return plan


__all__ = [
    "MicroBatch",
    "attention_cost_ratio",
    "greedy",
    "imbalance",
    "karmarkar_karp",
    "plan_global_batch",
    "round_robin",
    "sequence_cost",
]
