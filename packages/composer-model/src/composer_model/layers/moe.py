"""Mixture-of-experts feed-forward: sigmoid router with aux-loss-free balancing, grouped experts.

Routing follows DeepSeek-V3 (`noaux_tc`): sigmoid affinities; a per-expert bias that only
affects *which* experts are selected (never the gate values); group-limited selection (a group
scores as the sum of its two best biased affinities, tokens may only use the `topk_group` best
groups); gate values normalised over the selected experts and multiplied by the routed
scaling factor.

Router replay: the caller may hand in the expert indices chosen elsewhere (by the inference
engine). The gate values are then gathered from the router's full affinity vector at those
indices, so the router still receives gradient. An optional guard replaces replayed experts
that the current router finds implausible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from composer_kernels import grouped_mm
from composer_model.config import ModelConfig
from composer_model.layers.mlp import SwiGLU


@dataclass
class Routing:
    """One MoE layer's decision for N tokens."""

    indices: torch.Tensor  # [N, top_k] int64
    weights: torch.Tensor  # [N, top_k], gate values (scaled)
    replacements: torch.Tensor  # scalar int64: replayed experts swapped by the guard


class Router(nn.Module):
    """The gate: `weight` [E, hidden] and the selection-only bias `e_score_correction_bias` [E]."""

    e_score_correction_bias: torch.Tensor
    tokens_per_expert: torch.Tensor

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_experts = config.n_routed_experts
        self.top_k = config.num_experts_per_tok
        self.n_group = config.n_group
        self.topk_group = config.topk_group
        self.norm_topk_prob = config.norm_topk_prob
        self.scaling = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(self.num_experts, config.hidden_size))
        self.register_buffer(
            "e_score_correction_bias", torch.zeros(self.num_experts, dtype=torch.float32)
        )
        # Load seen since the last bias update (training only); not part of checkpoints.
        self.register_buffer(
            "tokens_per_expert",
            torch.zeros(self.num_experts, dtype=torch.float32),
            persistent=False,
        )

    _FP32_BUFFERS = ("e_score_correction_bias", "tokens_per_expert")

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        """Dtype casts skip the bias and load counters: sign-rule steps of 1e-3 need fp32."""
        kept = {name: self._buffers.pop(name) for name in self._FP32_BUFFERS}
        super()._apply(fn, recurse)
        for name, tensor in kept.items():
            assert tensor is not None
            self._buffers[name] = tensor.to(self.weight.device)
        return self

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Sigmoid affinities [N, E], in at least fp32."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        return torch.sigmoid(F.linear(x.to(dtype), self.weight.to(dtype)))

    def select(self, scores: torch.Tensor) -> torch.Tensor:
        """The router's own top-k [N, k], best first, using the bias and group limits."""
        choice = scores + self.e_score_correction_bias.to(scores.dtype)
        if self.n_group > 1:
            grouped = choice.view(-1, self.n_group, self.num_experts // self.n_group)
            group_scores = grouped.topk(2, dim=-1).values.sum(-1)  # [N, G]
            best_groups = group_scores.topk(self.topk_group, dim=-1).indices
            group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(
                1, best_groups, True
            )
            expert_mask = group_mask.repeat_interleave(self.num_experts // self.n_group, dim=1)
            choice = choice.masked_fill(~expert_mask, float("-inf"))
        return choice.topk(self.top_k, dim=-1, sorted=True).indices

    def forward(
        self,
        x: torch.Tensor,
        replay_indices: torch.Tensor | None = None,
        replay_guard: float | None = None,
    ) -> Routing:
        scores = self.scores(x)
        replacements = torch.zeros((), dtype=torch.long, device=x.device)
        if replay_indices is None:
            indices = self.select(scores)
        else:
            if replay_indices.shape != (x.shape[0], self.top_k):
                raise ValueError(
                    f"replay indices must be [tokens={x.shape[0]}, top_k={self.top_k}] for this layer; "
                    f"got {tuple(replay_indices.shape)}"
                )
            indices = replay_indices.to(device=x.device, dtype=torch.long)
            if replay_guard is not None:
                indices, replacements = self._guard(scores, indices, replay_guard)
        weights = scores.gather(1, indices)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        weights = weights * self.scaling
        if self.training:
            with torch.no_grad():
                self.tokens_per_expert += torch.bincount(
                    indices.flatten(), minlength=self.num_experts
                ).to(self.tokens_per_expert.dtype)
        return Routing(indices=indices, weights=weights.to(x.dtype), replacements=replacements)

    @torch.no_grad()
    def _guard(
        self, scores: torch.Tensor, replay: torch.Tensor, ratio: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Swap replayed experts scoring below `ratio` x the router's own k-th affinity.

        Any expert the router itself selects scores at least its own k-th affinity, so only
        replayed experts outside the router's own choice can be implausible, and there are
        always enough of the router's own (unused) candidates to replace them.
        """
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"replay_guard must be in (0, 1]; got {ratio}")
        own = self.select(scores)  # best first
        threshold = scores.gather(1, own).min(-1, keepdim=True).values * ratio
        implausible = scores.gather(1, replay) < threshold
        is_candidate = ~(own[:, :, None] == replay[:, None, :]).any(-1)
        order = torch.argsort((~is_candidate).to(torch.int8), dim=1, stable=True)
        candidates = own.gather(1, order)  # unused own choices first, best first
        rank = (implausible.long().cumsum(1) - 1).clamp(min=0)
        guarded = torch.where(implausible, candidates.gather(1, rank), replay)
        return guarded, implausible.sum()


class RoutedExperts(nn.Module):
    """E SwiGLU experts stored as stacked weights in grouped-GEMM layout ([E, in, out])."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_experts = config.n_routed_experts
        self.intermediate = config.moe_intermediate_size
        self.w_gate_up = nn.Parameter(
            torch.empty(self.num_experts, config.hidden_size, 2 * self.intermediate)
        )
        self.w_down = nn.Parameter(
            torch.empty(self.num_experts, self.intermediate, config.hidden_size)
        )
        self._mm = self._pick_matmul(config)

    @staticmethod
    def _pick_matmul(
        config: ModelConfig,
    ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        if config.expert_precision == "high":
            return grouped_mm
        try:
            from composer_kernels import quantized_grouped_mm  # type: ignore[attr-defined]
        except ImportError as error:
            raise ImportError(
                "expert_precision='nvfp4_mxfp8' needs composer_kernels.quantized_grouped_mm, which this "
                "composer-kernels does not provide; upgrade it or set expert_precision='high'"
            ) from error
        wgrad = config.high_precision_wgrad

        def quantized(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = quantized_grouped_mm(x, w, offsets, high_precision_wgrad=wgrad)
            return out

        return quantized

    def forward(self, x: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Dispatch by sorting (token, slot) pairs by expert; one grouped GEMM per projection."""
        if torch.compiler.is_compiling() and not torch.is_grad_enabled():
            return self._forward_static(x, routing)  # a captured inference step
        top_k = routing.indices.shape[1]
        flat = routing.indices.flatten()
        order = torch.argsort(flat, stable=True)
        token_of = order // top_k
        offsets = torch.bincount(flat, minlength=self.num_experts).cumsum(0)
        x_sorted = x[token_of]
        gate_up = self._mm(x_sorted, self.w_gate_up, offsets)
        gate, up = gate_up.split(self.intermediate, dim=-1)
        down = self._mm(F.silu(gate) * up, self.w_down, offsets)
        down = down * routing.weights.flatten()[order, None]
        return torch.zeros_like(x).index_add(0, token_of, down.to(x.dtype))

    def _forward_static(self, x: torch.Tensor, routing: Routing) -> torch.Tensor:
        """The same products with no data-dependent shapes, for a captured decode step.

        Sorting by expert makes group sizes that only the data knows, which a captured graph
        cannot hold. With few tokens (decode) two shapes of work are cheap instead: when every
        expert is likely to be picked (E <= tokens x k), run all experts on all tokens and let
        a zero gate drop the unpicked ones (0 x finite is exactly 0); otherwise gather each
        token's k expert matrices. Only the summation order of the k terms differs from
        `forward`. Inference only: a compiled training forward keeps the grouped dispatch
        (running every expert on every token of a batch would waste E / k of the work).
        Quantized experts have no such path: capture fails and the caller falls back to eager.
        """
        if self._mm is not grouped_mm:
            raise NotImplementedError("quantized experts have no captured decode path")
        tokens, top_k = routing.indices.shape
        weights = routing.weights.to(x.dtype)
        if self.num_experts <= tokens * top_k:
            gates = x.new_zeros(tokens, self.num_experts).scatter(1, routing.indices, weights)
            gate_up = torch.einsum("th,ehi->eti", x, self.w_gate_up)
            gate, up = gate_up.split(self.intermediate, dim=-1)
            down = torch.bmm(F.silu(gate) * up, self.w_down)  # [E, T, hidden]
            return torch.einsum("eth,te->th", down, gates)
        gate_up = torch.einsum("th,tkhi->tki", x, self.w_gate_up[routing.indices])
        gate, up = gate_up.split(self.intermediate, dim=-1)
        down = torch.einsum("tki,tkih->tkh", F.silu(gate) * up, self.w_down[routing.indices])
        return (down * weights[..., None]).sum(1)


class MoE(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate = Router(config)
        self.experts = RoutedExperts(config)
        self.shared_experts: SwiGLU | None = None
        if config.n_shared_experts:
            self.shared_experts = SwiGLU(
                config.hidden_size, config.moe_intermediate_size * config.n_shared_experts
            )

    def forward(
        self,
        x: torch.Tensor,
        replay_indices: torch.Tensor | None = None,
        replay_guard: float | None = None,
    ) -> tuple[torch.Tensor, Routing]:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        routing = self.gate(flat, replay_indices, replay_guard)
        out = self.experts(flat, routing)
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat)
        return out.view(shape), routing

    @torch.no_grad()
    def update_bias(self, rate: float, load: torch.Tensor | None = None) -> torch.Tensor:
        """Aux-loss-free balancing: bias_e += rate * sign(mean load - load_e); returns the load used.

        `load` defaults to the tokens counted since the last update (all-reduce it across
        data-parallel ranks before passing it in, so every rank applies the same update).
        """
        counts = (
            self.gate.tokens_per_expert if load is None else load.to(self.gate.tokens_per_expert)
        )
        used = counts.clone()
        self.gate.e_score_correction_bias += rate * torch.sign(counts.mean() - counts)
        self.gate.tokens_per_expert.zero_()
        return used
