"""One pre-norm decoder layer: attention (MLA, or `RotaryAttention` for small models), then a
dense SwiGLU or an MoE feed-forward."""

from __future__ import annotations

import torch
from torch import nn

from composer_model.config import ModelConfig
from composer_model.layers.attention import LatentCache, MultiHeadLatentAttention
from composer_model.layers.mlp import SwiGLU
from composer_model.layers.moe import MoE, Routing
from composer_model.layers.norm import RMSNorm
from composer_model.layers.rotary_attention import RotaryAttention


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn: MultiHeadLatentAttention | RotaryAttention = (
            RotaryAttention(config, layer_idx)
            if config.attention == "mha"
            else MultiHeadLatentAttention(config, layer_idx)
        )
        self.mlp: SwiGLU | MoE = (
            MoE(config)
            if config.is_moe_layer(layer_idx)
            else SwiGLU(config.hidden_size, config.intermediate_size)
        )
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def is_moe(self) -> bool:
        return isinstance(self.mlp, MoE)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
        cache: LatentCache | None = None,
        new_lengths: torch.Tensor | None = None,
        replay_indices: torch.Tensor | None = None,
        replay_guard: float | None = None,
    ) -> tuple[torch.Tensor, Routing | None]:
        """x is packed [N, hidden] (with cu_seqlens) or, with a cache, [B, n, hidden]."""
        normed = self.input_layernorm(x)
        if cache is None:
            assert cu_seqlens is not None
            attn = self.self_attn(normed, cos, sin, cu_seqlens)
        else:
            assert new_lengths is not None
            attn = self.self_attn.forward_cached(normed, cos, sin, new_lengths, cache)
        x = x + attn
        normed = self.post_attention_layernorm(x)
        if isinstance(self.mlp, MoE):
            out, routing = self.mlp(normed, replay_indices, replay_guard)
            return x + out, routing
        return x + self.mlp(normed), None
