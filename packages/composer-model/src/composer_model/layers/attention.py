"""Multi-head latent attention (MLA), as in DeepSeek-V2/V3 and Kimi K2.

Queries go through an optional low-rank bottleneck (`q_a_proj` -> norm -> `q_b_proj`). Keys and
values are compressed into one latent `c_kv` of width `kv_lora_rank` plus a single shared rope
key of width `qk_rope_head_dim`; that pair is all an inference cache has to keep.

Two paths:
- training / full recompute (`forward`): expand the latent into per-head keys and values and
  call `composer_kernels.attention` on the packed, document-masked sequence;
- cached decode (`forward_cached`): the "absorbed" form, which folds the key up-projection
  into the query and the value up-projection into the output, so attention runs directly
  against the cached latents without ever materialising per-head keys.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from composer_kernels import attention
from composer_model.config import ModelConfig
from composer_model.layers.norm import RMSNorm
from composer_model.layers.rope import apply_rope, softmax_scale


class LatentCache(Protocol):
    """What the cached path needs from an inference cache (the engine implements it)."""

    def read(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Past latents [B, P, kv_lora_rank + rope_dim] (right-padded) and their lengths [B]."""
        ...

    def write(self, layer_idx: int, latents: torch.Tensor) -> None:
        """Append this step's latents [B, n, kv_lora_rank + rope_dim] (padding included)."""
        ...

    def mask(self, past_len: int, n: int) -> torch.Tensor:
        """Which keys [B, n, past_len + n] each new query may see (the same for every layer).

        `latent_attention_mask` computes it; a cache may compute it once per forward.
        """
        ...


def latent_attention_mask(
    past_lengths: torch.Tensor, past_len: int, new_lengths: torch.Tensor, n: int
) -> torch.Tensor:
    """[B, n, past_len + n]: a sequence's own past (right-padded) and its new tokens causally."""
    device = past_lengths.device
    key_idx = torch.arange(past_len + n, device=device)
    query_idx = torch.arange(n, device=device)
    past_ok = (key_idx[None, :] < past_lengths[:, None]) & (key_idx[None, :] < past_len)
    new_pos = key_idx - past_len
    new_ok = (new_pos[None, None, :] <= query_idx[None, :, None]) & (new_pos[None, None, :] >= 0)
    new_ok = new_ok & (new_pos[None, None, :] < new_lengths[:, None, None])
    return past_ok[:, None, :] | new_ok


def cached_attention_probs(scores: torch.Tensor, scale: float, mask: torch.Tensor) -> torch.Tensor:
    """Attention weights [B, H, n, P + n] from raw scores, in float32 at least; `mask` is the
    cache's [B, n, P + n]. A padded query row, which sees nothing, gets zeros, not NaN."""
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) * scale
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.nope_dim = config.qk_nope_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.v_dim = config.v_head_dim
        self.kv_rank = config.kv_lora_rank
        self.scale = softmax_scale(config)
        hidden, heads, qk = config.hidden_size, config.num_attention_heads, config.qk_head_dim
        bias = config.attention_bias
        self.q_proj: nn.Linear | None = None
        self.q_a_proj: nn.Linear | None = None
        self.q_a_layernorm: RMSNorm | None = None
        self.q_b_proj: nn.Linear | None = None
        if config.q_lora_rank is None:
            self.q_proj = nn.Linear(hidden, heads * qk, bias=False)
        else:
            self.q_a_proj = nn.Linear(hidden, config.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.rms_norm_eps)
            self.q_b_proj = nn.Linear(config.q_lora_rank, heads * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.kv_rank + self.rope_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(self.kv_rank, config.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.kv_rank, heads * (self.nope_dim + self.v_dim), bias=False)
        self.o_proj = nn.Linear(heads * self.v_dim, hidden, bias=bias)

    def _queries(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.q_proj is not None:
            q = self.q_proj(x)
        else:
            assert (
                self.q_a_proj is not None
                and self.q_a_layernorm is not None
                and self.q_b_proj is not None
            )
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(*x.shape[:-1], self.num_heads, self.nope_dim + self.rope_dim)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        return q_nope, apply_rope(q_rope, cos, sin)

    def latents(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """The cacheable part: normalised c_kv and the rotated shared rope key, [..., rank + rope]."""
        kv = self.kv_a_proj_with_mqa(x)
        c_kv, k_rope = kv.split([self.kv_rank, self.rope_dim], dim=-1)
        k_rope = apply_rope(k_rope.unsqueeze(-2), cos, sin).squeeze(-2)
        return torch.cat([self.kv_a_layernorm(c_kv), k_rope], dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cu_seqlens: torch.Tensor,
    ) -> torch.Tensor:
        """x [N, hidden] packed; documents delimited by cu_seqlens."""
        q_nope, q_rope = self._queries(x, cos, sin)
        latent = self.latents(x, cos, sin)
        c_kv, k_rope = latent.split([self.kv_rank, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(c_kv).view(x.shape[0], self.num_heads, self.nope_dim + self.v_dim)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(-1, self.num_heads, -1)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
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
        """x [B, n, hidden]: n new tokens per sequence (right-padded to new_lengths) after the cache."""
        batch, n, _ = x.shape
        q_nope, q_rope = self._queries(x, cos, sin)  # [B, n, H, dn], [B, n, H, dr]
        new_latent = self.latents(x, cos, sin)  # [B, n, r + dr]
        past, _ = cache.read(self.layer_idx)
        cache.write(self.layer_idx, new_latent)
        keys = torch.cat([past.to(new_latent.dtype), new_latent], dim=1)  # [B, P + n, r + dr]
        c_kv, k_rope = keys.split([self.kv_rank, self.rope_dim], dim=-1)
        w = self.kv_b_proj.weight.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_rank)
        w_uk, w_uv = w[:, : self.nope_dim], w[:, self.nope_dim :]
        q_latent = torch.einsum("bnhd,hdr->bnhr", q_nope, w_uk)
        scores = torch.einsum("bnhr,blr->bhnl", q_latent, c_kv) + torch.einsum(
            "bnhd,bld->bhnl", q_rope, k_rope
        )
        probs = cached_attention_probs(scores, self.scale, cache.mask(past.shape[1], n))
        probs = probs.to(c_kv.dtype)
        out_latent = torch.einsum("bhnl,blr->bnhr", probs, c_kv)
        out = torch.einsum("bnhr,hvr->bnhv", out_latent, w_uv)
        return self.o_proj(out.reshape(batch, n, self.num_heads * self.v_dim))
