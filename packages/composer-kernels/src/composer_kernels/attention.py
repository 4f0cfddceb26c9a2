"""Attention over packed variable-length sequences.

Documents are concatenated along the token axis and delimited by `cu_seqlens`
(cumulative lengths, starting at 0), the layout of flash-attn's varlen kernels. A
token attends only to tokens of its own document (and, if causal, not to later ones).

Backends, chosen per call:

- flash-attn's `flash_attn_varlen_func` when flash-attn is installed, the tensors are
  on CUDA in fp16/bf16 (its log-sum-exp comes back without a gradient);
- otherwise PyTorch's `scaled_dot_product_attention`: with a boolean document mask in
  one call, or once per document when the pack is long (a T x T mask would be large)
  or holds a few documents that cover little of the T x T score matrix;
- with `return_lse=True` off flash-attn, an explicit per-document softmax, so that the
  log-sum-exp (which context parallelism needs to merge partial results) has gradients.
"""

from __future__ import annotations

import importlib.util
import itertools
import math

import torch
import torch.nn.functional as F

# Above this many tokens the T x T boolean mask (T^2 bytes) is replaced by a loop over
# documents, whose cost is the sum of squared document lengths.
MASKED_SDPA_MAX_TOKENS = 8192
# Below it, one SDPA call a document still wins when there are few documents and they
# cover at most a quarter of the T x T score matrix (benchmarks/bench_attention.py: on
# 2 CPU cores, 8 documents in 2048 tokens 1.3x and 16 in 4096 1.9x faster than the
# mask; 64 documents in 2048 tokens 2.3x slower, from per-call overhead).
PER_DOCUMENT_MAX_DOCS = 16
# From this many tokens a call pads narrower values to reach SDPA's fused CPU kernel.
PAD_VALUES_MIN_TOKENS = 512


def _validate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(
            "attention wants packed q [T, H, D], k [T, Hkv, D], v [T, Hkv, Dv]; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(
            f"q, k, v must have the same number of tokens; got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}"
        )
    if k.shape[1] != v.shape[1] or q.shape[1] % k.shape[1] != 0:
        raise ValueError(
            f"query heads ({q.shape[1]}) must be a multiple of key/value heads "
            f"({k.shape[1]}, {v.shape[1]})"
        )
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k head dims differ: {q.shape[2]} vs {k.shape[2]}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.is_floating_point():
        raise ValueError(
            f"cu_seqlens must be a 1-D integer tensor [0, ..., T]; got {tuple(cu_seqlens.shape)} "
            f"{cu_seqlens.dtype}"
        )


def _check_bounds(cu: list[int], total: int) -> None:
    if cu[0] != 0 or cu[-1] != total or any(b < a for a, b in itertools.pairwise(cu)):
        raise ValueError(f"cu_seqlens must rise from 0 to T={total}; got {cu}")


def _flash_attn_applies(q: torch.Tensor) -> bool:
    return (
        q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and importlib.util.find_spec("flash_attn") is not None
    )


def _flash_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    from flash_attn import flash_attn_varlen_func

    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    max_len = int((cu[1:] - cu[:-1]).max())
    out, lse, _ = flash_attn_varlen_func(
        q,
        k,
        v,
        cu,
        cu,
        max_len,
        max_len,
        softmax_scale=scale,
        causal=causal,
        return_attn_probs=True,
    )
    return out, lse


def _document_mask(
    cu: torch.Tensor, total: int, causal: bool, device: torch.device
) -> torch.Tensor:
    doc = torch.zeros(total, dtype=torch.int32, device=device)
    starts = cu[1:-1].to(device=device, dtype=torch.long)
    doc.index_add_(0, starts[starts < total], torch.ones_like(starts, dtype=torch.int32))
    doc = doc.cumsum(0)
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= torch.ones(total, total, dtype=torch.bool, device=device).tril()
    return mask


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float,
    mask: torch.Tensor | None = None,
    batch: int = 1,
) -> torch.Tensor:
    """SDPA on [T, H, D] tensors that hold `batch` documents of equal length, back to back
    (grouped-query heads expanded by SDPA itself).

    On the CPU, SDPA's fused (flash) kernel needs values as wide as queries and keys;
    MLA's are narrower (128 against 192 in DeepSeek-V3), which sends the call to the
    unfused path that materialises the scores. Zero columns appended to v give zero
    output columns, sliced off again. `benchmarks/bench_attention.py` (2 cores, forward +
    backward, tiny's widths): 2x on 2048 tokens with a document mask, none on documents
    of 256, where the unfused path is cheap; hence the length threshold.
    """
    width = v.shape[-1]
    pad = q.shape[-1] - width
    if pad > 0 and q.device.type == "cpu" and q.shape[0] // batch >= PAD_VALUES_MIN_TOKENS:
        v = F.pad(v, (0, pad))

    def heads_first(x: torch.Tensor) -> torch.Tensor:  # [T, H, D] -> [batch, H, T/batch, D]
        return x.view(batch, x.shape[0] // batch, *x.shape[1:]).transpose(1, 2)

    out = F.scaled_dot_product_attention(
        heads_first(q),
        heads_first(k),
        heads_first(v),
        attn_mask=mask,
        is_causal=causal and mask is None,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[1], -1)[..., :width]


def _explicit_with_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One document: softmax attention in float32 with its log-sum-exp [H, L]."""
    repeat = q.shape[1] // k.shape[1]
    qh = q.transpose(0, 1).float()
    kh = k.repeat_interleave(repeat, dim=1).transpose(0, 1).float()
    vh = v.repeat_interleave(repeat, dim=1).transpose(0, 1).float()
    scores = (qh @ kh.transpose(1, 2)) * scale
    if causal:
        length = q.shape[0]
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse.unsqueeze(-1)) @ vh
    return out.transpose(0, 1).to(q.dtype), lse


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    causal: bool = True,
    softmax_scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, Hkv, D], v [T, Hkv, Dv] -> out [T, H, Dv] (and lse [H, T] in fp32).

    `cu_seqlens` [num_docs + 1] holds document boundaries (None: one document);
    `softmax_scale` defaults to 1/sqrt(D). Grouped-query attention: H a multiple of Hkv.
    """
    total = q.shape[0]
    if cu_seqlens is None:
        cu_seqlens = torch.tensor([0, total], dtype=torch.int32)
    _validate(q, k, v, cu_seqlens)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[2])

    if _flash_attn_applies(q):
        out, lse = _flash_attn(q, k, v, cu_seqlens, causal, scale)
        return (out, lse) if return_lse else out

    cu = [int(c) for c in cu_seqlens.tolist()]
    _check_bounds(cu, total)
    spans = [(a, b) for a, b in itertools.pairwise(cu) if b > a]

    if return_lse:
        outs, lses = [], []
        for a, b in spans:
            o, s = _explicit_with_lse(q[a:b], k[a:b], v[a:b], causal, scale)
            outs.append(o)
            lses.append(s)
        if not outs:
            return q.new_zeros(0, q.shape[1], v.shape[2]), q.new_zeros(
                q.shape[1], 0, dtype=torch.float32
            )
        return torch.cat(outs, dim=0), torch.cat(lses, dim=1)

    if len(spans) <= 1:
        return _sdpa(q, k, v, causal, scale) if total else q.new_zeros(0, q.shape[1], v.shape[2])
    if len({b - a for a, b in spans}) == 1 and spans[-1][1] == total:
        # Documents of one length filling the pack (a [B, T] batch): one batched call.
        return _sdpa(q, k, v, causal, scale, batch=len(spans))
    covered = sum((b - a) ** 2 for a, b in spans)
    few_documents = len(spans) <= PER_DOCUMENT_MAX_DOCS and 4 * covered <= total * total
    if total <= MASKED_SDPA_MAX_TOKENS and not few_documents:
        mask = _document_mask(cu_seqlens, total, causal, q.device)
        return _sdpa(q, k, v, causal, scale, mask)
    return torch.cat([_sdpa(q[a:b], k[a:b], v[a:b], causal, scale) for a, b in spans], dim=0)


__all__ = ["MASKED_SDPA_MAX_TOKENS", "PAD_VALUES_MIN_TOKENS", "PER_DOCUMENT_MAX_DOCS", "attention"]
