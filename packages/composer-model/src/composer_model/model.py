"""The decoder: embeddings, MLA + dense/MoE layers, final norm, LM head, optional MTP modules.

Every forward runs on a packed token stream: a [B, T] batch is flattened to B documents of
length T, and a packed [1, T] row carries `cu_seqlens` (document boundaries) and `positions`
(restarting at 0 in each document). Attention never crosses a document boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from composer_model.config import ModelConfig
from composer_model.layers.attention import LatentCache
from composer_model.layers.block import DecoderLayer
from composer_model.layers.moe import MoE, Routing
from composer_model.layers.norm import RMSNorm
from composer_model.layers.rope import RotaryEmbedding, rope_frequencies
from composer_model.mtp import MTPModule


def initialise(
    name: str,
    tensor: torch.Tensor,
    config: ModelConfig,
    generator: torch.Generator | None = None,
) -> None:
    """One parameter's initial value, in place, by its name: ones for norms, zeros for
    biases and the balancing bias, normal(0, initializer_range) for matrices (the
    attention's: attention_initializer_range where set). A fresh model and an MTP module a
    checkpoint lacks start the same way."""
    with torch.no_grad():
        if name.endswith(("e_score_correction_bias", ".bias")):
            tensor.zero_()
        elif tensor.dim() == 1:  # norm weights
            tensor.fill_(1.0)
        else:
            std = config.initializer_range
            if ".self_attn." in name and config.attention_initializer_range is not None:
                std = config.attention_initializer_range
            tensor.normal_(0.0, std, generator=generator)


@dataclass
class ModelOutput:
    """What a forward returns. Token axes follow the input: [B, T, ...] (or [1, T, ...] packed)."""

    logits: torch.Tensor
    hidden: torch.Tensor  # last decoder layer's output, before the final norm (what MTP consumes)
    routing: list[torch.Tensor] | None  # per MoE layer: expert indices [B*T, top_k]
    replacements: torch.Tensor  # replayed experts the plausibility guard swapped (all layers)
    cu_seqlens: torch.Tensor  # document boundaries of the flattened stream
    positions: torch.Tensor  # [B*T]
    mtp_logits: list[torch.Tensor] | None = (
        None  # per MTP depth k: [B, T, V] predicting token t+k+1
    )


def document_ids(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Index of the document each of the `total` packed tokens belongs to."""
    marks = torch.zeros(total, dtype=torch.long, device=cu_seqlens.device)
    marks[cu_seqlens[1:-1].long()] = 1
    return marks.cumsum(0)


def positions_from_cu_seqlens(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Positions restarting at 0 at every document start."""
    starts = cu_seqlens.long()[document_ids(cu_seqlens, total)]
    return torch.arange(total, device=cu_seqlens.device) - starts


class ComposerModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        # Passing the weight skips nn.Embedding's own init (normal_ on the meta device takes
        # ~40 s for DeepSeek-V3's table in torch 2.x); reset_parameters initialises it.
        self.embed_tokens = nn.Embedding(
            config.vocab_size,
            config.hidden_size,
            _weight=torch.empty(config.vocab_size, config.hidden_size),
        )
        self.layers = nn.ModuleList(
            DecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = RotaryEmbedding(config)
        self.mtp = nn.ModuleList(
            MTPModule(config, depth) for depth in range(config.num_nextn_predict_layers)
        )
        if not any(p.is_meta for p in self.parameters()):
            self.reset_parameters()

    # --- construction -------------------------------------------------------------------

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Every parameter as `initialise` sets it; zero balancing bias."""
        for name, param in self.named_parameters():
            initialise(name, param, self.config)
        for module in self.modules():
            if isinstance(module, MoE):
                module.gate.e_score_correction_bias.zero_()

    @torch.no_grad()
    def init_buffers(self, device: torch.device | str | None = None) -> None:
        """(Re)create the non-persistent buffers, e.g. after building on the meta device."""
        inv_freq, _ = rope_frequencies(self.config)
        self.rotary.inv_freq = inv_freq.to(device)
        for module in self.modules():
            if isinstance(module, MoE):
                module.gate.tokens_per_expert = torch.zeros(
                    self.config.n_routed_experts, dtype=torch.float32, device=device
                )

    @property
    def mtp_modules(self) -> list[MTPModule]:
        return [m for m in self.mtp if isinstance(m, MTPModule)]

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        return [layer for layer in self.layers if isinstance(layer, DecoderLayer)]

    @property
    def moe_layers(self) -> list[MoE]:
        return [layer.mlp for layer in self.decoder_layers if isinstance(layer.mlp, MoE)]

    def num_parameters(self, active: bool = False, include_mtp: bool = False) -> int:
        """Total parameters, or those one token touches (top-k of the routed experts)."""
        total = 0
        for name, param in self.named_parameters():
            if not include_mtp and name.startswith("mtp."):
                continue
            count = param.numel()
            if active and ".experts.w_" in name:
                count = count * self.config.num_experts_per_tok // self.config.n_routed_experts
            total += count
        return total

    # --- balancing ----------------------------------------------------------------------

    @torch.no_grad()
    def update_balancing_bias(
        self,
        rate: float | None = None,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Apply the sign rule to every MoE layer's selection bias; returns the loads [L_moe, E].

        Call once per optimiser step. `reduce` (e.g. an all-reduce over data-parallel ranks)
        sees the stacked per-layer token counts before they are used.
        """
        layers = self.moe_layers + [
            m.layer.mlp for m in self.mtp_modules if isinstance(m.layer.mlp, MoE)
        ]
        if not layers:
            return torch.zeros(0)
        loads = torch.stack([layer.gate.tokens_per_expert for layer in layers])
        if reduce is not None:
            loads = reduce(loads)
        step = self.config.bias_update_rate if rate is None else rate
        for layer, load in zip(layers, loads, strict=True):
            layer.update_bias(step, load)
        return loads

    # --- forward ------------------------------------------------------------------------

    def _flatten(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None,
        cu_seqlens: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if input_ids.dim() != 2:
            raise ValueError(
                f"input_ids must be [B, T] (or packed [1, T]); got shape {tuple(input_ids.shape)}"
            )
        batch, length = input_ids.shape
        device = input_ids.device
        if cu_seqlens is not None:
            if batch != 1:
                raise ValueError(f"packed input with cu_seqlens must be [1, T]; got batch {batch}")
            cu_seqlens = cu_seqlens.to(device=device, dtype=torch.int32)
            if cu_seqlens.dim() != 1 or int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != length:
                raise ValueError(
                    f"cu_seqlens must be 1-D, start at 0 and end at T={length}; got {cu_seqlens.tolist()}"
                )
        else:
            cu_seqlens = torch.arange(batch + 1, device=device, dtype=torch.int32) * length
        flat_ids = input_ids.reshape(-1)
        if positions is None:
            positions = positions_from_cu_seqlens(cu_seqlens, flat_ids.numel())
        else:
            if positions.shape != input_ids.shape:
                raise ValueError(
                    f"positions must match input_ids {tuple(input_ids.shape)}; got {tuple(positions.shape)}"
                )
            positions = positions.reshape(-1).to(device)
        return flat_ids, positions, cu_seqlens

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        replay_indices: Sequence[torch.Tensor] | torch.Tensor | None = None,
        return_routing: bool = False,
        replay_guard: float | None = None,
        return_mtp: bool = False,
        mtp_shifted_ids: Sequence[torch.Tensor] | None = None,
        mtp_detach_trunk: bool = False,
    ) -> ModelOutput:
        """The packed forward; with `return_mtp` also every MTP depth's logits.

        MTP depth k at position t reads the token k ahead (`torch.roll` of the packed ids,
        right for a whole row). `mtp_shifted_ids` (one tensor a depth, a token per position)
        replaces that roll: a context-parallel shard holds only part of the row, so its
        tokens k ahead are computed on the whole row and sharded by the caller.

        `mtp_detach_trunk`: the MTP depths read the trunk's hidden states, the embedding and
        the output head through detached copies, so an MTP loss trains the MTP modules only.
        RL wants this: its policy-gradient term is small (a gradient norm of ~1e-3 here)
        and the self-distillation term's gradient through the shared weights was ~50x
        larger, so under Adam it, not the reward, set the trunk's updates."""
        flat_ids, flat_pos, cu_seqlens = self._flatten(input_ids, positions, cu_seqlens)
        moe_count = len(self.moe_layers)
        if isinstance(replay_indices, torch.Tensor):
            if replay_indices.dim() != 3:
                raise ValueError(
                    "replay_indices as one tensor must be [tokens, num_moe_layers, top_k] (the engine's "
                    f"`routing` layout); got shape {tuple(replay_indices.shape)}"
                )
            replay_indices = list(replay_indices.long().unbind(1))
        if replay_indices is not None and len(replay_indices) != moe_count:
            raise ValueError(
                f"replay_indices must hold one tensor per MoE layer ({moe_count}); got {len(replay_indices)}"
            )
        cos, sin = self.rotary(flat_pos)
        x = self.embed_tokens(flat_ids)
        routing: list[torch.Tensor] = []
        replacements = torch.zeros((), dtype=torch.long, device=x.device)
        moe_idx = 0
        for layer in self.decoder_layers:
            replay = None
            if layer.is_moe and replay_indices is not None:
                replay = replay_indices[moe_idx]
            x, info = layer(
                x, cos, sin, cu_seqlens=cu_seqlens, replay_indices=replay, replay_guard=replay_guard
            )
            if info is not None:
                routing.append(info.indices)
                replacements = replacements + info.replacements
                moe_idx += 1
        hidden = x
        logits = self.lm_head(self.norm(hidden))
        shape = input_ids.shape
        mtp_logits = None
        if return_mtp and len(self.mtp):
            mtp_logits = []
            h = hidden.detach() if mtp_detach_trunk else hidden
            for k, module in enumerate(self.mtp_modules, start=1):
                shifted = (
                    torch.roll(flat_ids, -k)
                    if mtp_shifted_ids is None
                    else mtp_shifted_ids[k - 1].reshape(-1).to(flat_ids.device)
                )
                if mtp_detach_trunk:
                    embeds = F.embedding(shifted, self.embed_tokens.weight.detach())
                else:
                    embeds = self.embed_tokens(shifted)
                h = module(h, embeds, cos, sin, cu_seqlens=cu_seqlens)
                normed = module.shared_head.norm(h)
                if mtp_detach_trunk:
                    head = F.linear(normed, self.lm_head.weight.detach())
                else:
                    head = self.lm_head(normed)
                mtp_logits.append(head.view(*shape, -1))
        return ModelOutput(
            logits=logits.view(*shape, -1),
            hidden=hidden.view(*shape, -1),
            routing=routing if return_routing else None,
            replacements=replacements,
            cu_seqlens=cu_seqlens,
            positions=flat_pos,
            mtp_logits=mtp_logits,
        )

    def forward_cached(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        new_lengths: torch.Tensor,
        cache: LatentCache,
        return_routing: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, list[Routing]]:
        """Inference step: [B, n] new tokens after each sequence's cached latents.

        Returns logits [B, n, V], the pre-norm hidden state [B, n, hidden] and per-MoE-layer
        routing over the B*n (padded) tokens.
        """
        cos, sin = self.rotary(positions)
        x = self.embed_tokens(input_ids)
        routing: list[Routing] = []
        for layer in self.decoder_layers:
            x, info = layer(x, cos, sin, cache=cache, new_lengths=new_lengths)
            if info is not None and return_routing:
                routing.append(info)
        return self.lm_head(self.norm(x)), x, routing


__all__ = ["ComposerModel", "ModelOutput", "document_ids", "positions_from_cu_seqlens"]
