"""Plain multi-head attention with RoPE over every query and key dimension (`attention="mha"`).

An option for small models, not the Kimi-K2 shape. At the tiny preset's width MLA does not
form an induction circuit (copying a sequence seen once) in 1,500 steps of copying alone,
where this attention does (docs/model/2026-12-06-induction-formation.md); a policy that
cannot copy a name it read once cannot use a repository's names.

Each head's key is `qk_rope_head_dim` wide and rotated whole; values are `v_head_dim` wide.
The inference cache keeps every head's rotated key and value, `heads * (rope + v)` numbers a
token a layer, behind the same `LatentCache` protocol as MLA's latents.
"""

from __future__ import annotations

import torch
from torch import nn

from composer_kernels import attention
from composer_model.config import ModelConfig
from composer_model.layers.attention import LatentCache, cached_attention_probs
from composer_model.layers.rope import apply_rope, softmax_scale


class RotaryAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        self.scale = softmax_scale(config)
        hidden, heads, bias = config.hidden_size, config.num_attention_heads, config.attention_bias
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, heads * self.v_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.v_dim, hidden, bias=bias)

    def _project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated queries and keys [..., H, head_dim] and values [..., H, v_dim]."""
        shape = (*x.shape[:-1], self.num_heads)
        q = apply_rope(self.q_proj(x).view(*shape, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(*shape, self.head_dim), cos, sin)
        return q, k, self.v_proj(x).view(*shape, self.v_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cu_seqlens: torch.Tensor,
    ) -> torch.Tensor:
        """x [N, hidden] packed; documents delimited by cu_seqlens."""
        q, k, v = self._project(x, cos, sin)
        out = attention(q, k, v, cu_seqlens=cu_seqlens, causal=True, softmax_scale=self.scale)
        assert isinstance(out, torch.Tensor)
        return self.o_proj(out.reshape(x.shape[0], self.num_heads * self.v_dim))

    def forward_cached(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        new_lengths: torch.Tensor,
        cache: LatentCache,
    ) -> torch.Tensor:
        """x [B, n, hidden]: n new tokens per sequence (right-padded) after the cache."""
        batch, n, _ = x.shape
        q, k, v = self._project(x, cos, sin)
        past, _ = cache.read(self.layer_idx)
        cache.write(self.layer_idx, torch.cat([k.flatten(-2), v.flatten(-2)], dim=-1))
        past_k, past_v = past.to(k.dtype).split(
            [self.num_heads * self.head_dim, self.num_heads * self.v_dim], dim=-1
        )
        keys = torch.cat([past_k.unflatten(-1, k.shape[-2:]), k], dim=1)  # [B, P + n, H, d]
        values = torch.cat([past_v.unflatten(-1, v.shape[-2:]), v], dim=1)
        scores = torch.einsum("bnhd,blhd->bhnl", q, keys)
        probs = cached_attention_probs(scores, self.scale, cache.mask(past.shape[1], n))
        probs = probs.to(values.dtype)
        out = torch.einsum("bhnl,blhv->bnhv", probs, values)
        return self.o_proj(out.reshape(batch, n, self.num_heads * self.v_dim))
