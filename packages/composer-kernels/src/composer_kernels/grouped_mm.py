"""Grouped matrix multiply for mixture-of-experts layers, in high precision.

Tokens arrive sorted by expert; `offsets[e]` is the end (exclusive) of expert e's rows,
so expert e owns rows `offsets[e-1]:offsets[e]`. This is the layout torch's native
`_grouped_mm` uses, which lets the GPU path drop in without reshuffling.
"""

from __future__ import annotations

import torch


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Multiply each expert's rows of `x` [T, K] by its weight `w[e]` [K, N]; returns [T, N]."""
    if x.dim() != 2 or w.dim() != 3:
        raise ValueError(
            f"grouped_mm wants x [T, K] and w [E, K, N]; got {tuple(x.shape)} and {tuple(w.shape)}"
        )
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"inner dimensions differ: x has K={x.shape[1]}, w has K={w.shape[1]}")
    if offsets.dim() != 1 or offsets.numel() != w.shape[0]:
        raise ValueError(
            f"offsets must hold one end offset per expert ({w.shape[0]}); got {tuple(offsets.shape)}"
        )
    out = x.new_empty(x.shape[0], w.shape[2])
    ends = offsets.tolist()
    start = 0
    for expert, end in enumerate(ends):
        if end > start:
            out[start:end] = x[start:end] @ w[expert]
        start = end
    if start != x.shape[0]:
        raise ValueError(f"offsets end at {start} but x has {x.shape[0]} rows")
    return out
