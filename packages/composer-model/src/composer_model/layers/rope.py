"""Rotary position embeddings with YaRN scaling, on interleaved pairs as DeepSeek-V3 stores them.

DeepSeek-V3 checkpoints rotate pairs `(x0, x1), (x2, x3), ...`; the rotated halves are written
out de-interleaved (`[evens, odds]`), which leaves every q.k dot product unchanged and matches
`transformers`' `apply_rotary_pos_emb_interleave` bit for bit.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from composer_model.config import ModelConfig


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_frequencies(config: ModelConfig) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [dim/2] and the factor YaRN applies to cos/sin."""
    dim = config.qk_rope_head_dim
    base = config.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolation = 1.0 / pos_freqs
    scaling = config.rope_scaling
    if scaling is None:
        return extrapolation, 1.0
    factor = scaling.factor
    interpolation = 1.0 / (factor * pos_freqs)

    def correction_dim(rotations: float) -> float:
        original = scaling.original_max_position_embeddings
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = float(max(math.floor(correction_dim(scaling.beta_fast)), 0))
    high = float(min(math.ceil(correction_dim(scaling.beta_slow)), dim - 1))
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep_extrapolated = 1 - ramp
    inv_freq = interpolation * (1 - keep_extrapolated) + extrapolation * keep_extrapolated
    if scaling.mscale and scaling.mscale_all_dim:
        attention_factor = _yarn_mscale(factor, scaling.mscale) / _yarn_mscale(
            factor, scaling.mscale_all_dim
        )
    else:
        attention_factor = _yarn_mscale(factor)
    return inv_freq, attention_factor


def softmax_scale(config: ModelConfig) -> float:
    """1/sqrt(d_qk), times YaRN's mscale^2 when the context is extended (DeepSeek-V3's rule)."""
    scale = config.attention_qk_dim**-0.5
    scaling = config.rope_scaling
    if scaling is not None and scaling.mscale_all_dim:
        mscale = _yarn_mscale(scaling.factor, scaling.mscale_all_dim)
        scale = scale * mscale * mscale
    return scale


class RotaryEmbedding(nn.Module):
    """Turns integer positions into (cos, sin) tables of shape [..., rope_dim/2]."""

    inv_freq: torch.Tensor

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        inv_freq, self.attention_factor = rope_frequencies(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq.to(positions.device)
        return freqs.cos() * self.attention_factor, freqs.sin() * self.attention_factor


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of `x` [..., heads, dim]; cos/sin are [..., dim/2]."""
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    # unbind, not x[..., 0::2]: a strided slice's backward zero-fills a gradient as large as
    # x for each half; unbind's stacks the two.
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
