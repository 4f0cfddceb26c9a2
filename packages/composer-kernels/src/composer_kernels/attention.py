"""Attention over packed variable-length sequences.

Documents are concatenated along the token axis and delimited by `cu_seqlens`
(cumulative lengths, starting at 0), the layout flash-attn's varlen kernels use.
"""

from __future__ import annotations

import math

import torch


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    causal: bool = True,
    softmax_scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, Hkv, D], v [T, Hkv, Dv] -> out [T, H, Dv] (and lse [H, T] in fp32)."""
    total, heads, head_dim = q.shape
    if cu_seqlens is None:
        cu_seqlens = torch.tensor([0, total], device=q.device, dtype=torch.int32)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    if k.shape[1] != heads:
        repeat = heads // k.shape[1]
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    # Document mask: token i sees token j only within its own document (and j <= i if causal).
    doc = torch.zeros(total, dtype=torch.long, device=q.device)
    doc[cu_seqlens[1:-1].long()] = 1
    doc = doc.cumsum(0)
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= torch.ones(total, total, dtype=torch.bool, device=q.device).tril()
    qh, kh, vh = (t.transpose(0, 1) for t in (q, k, v))  # [H, T, D]
    scores = (qh.float() @ kh.float().transpose(1, 2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = (torch.softmax(scores, dim=-1) @ vh.float()).to(q.dtype).transpose(0, 1)
    if return_lse:
        return out, lse
    return out


__all__ = ["attention"]
