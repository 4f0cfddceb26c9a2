"""Grouped matrix multiply for mixture-of-experts layers, in high precision.

Tokens arrive sorted by expert; `offsets[e]` is the end (exclusive) of expert e's rows,
so expert e owns rows `offsets[e-1]:offsets[e]`. This is the layout of torch's native
`torch._grouped_mm`, which runs all experts in one kernel. `grouped_mm` uses it on
CUDA when it applies (bfloat16, sm90+, 16-byte aligned rows: K and N multiples of 8)
and a loop of per-expert matmuls otherwise. On the CPU torch has a native grouped GEMM
too, but it measured slower than the loop in forward (benchmarks/bench_grouped_mm.py),
so the CPU default is the loop; `grouped_mm_native` calls torch's directly. All paths
are differentiable.
"""

from __future__ import annotations

import torch


def _validate(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> None:
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
    if offsets.is_floating_point():
        raise ValueError(f"offsets must be integers, got {offsets.dtype}")


def _check_ends(offsets: torch.Tensor, rows: int) -> list[int]:
    ends = [int(e) for e in offsets.tolist()]
    start = 0
    for expert, end in enumerate(ends):
        if end < start:
            raise ValueError(f"offsets must not decrease: expert {expert} ends at {end} < {start}")
        start = end
    if start != rows:
        raise ValueError(f"offsets end at {start} but x has {rows} rows")
    return ends


def native_grouped_mm_applies(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether torch's fused grouped GEMM takes these operands (on CPU or CUDA)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        return False
    if x.device != w.device or x.device.type not in ("cpu", "cuda"):
        return False
    if x.device.type == "cuda" and torch.cuda.get_device_capability(x.device) < (9, 0):
        return False
    # Row strides must be 16-byte multiples.
    return x.shape[1] % 8 == 0 and w.shape[2] % 8 == 0 and x.shape[0] > 0


def grouped_mm_loop(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Reference: one matmul per expert over its rows (the peer the benchmark measures)."""
    _validate(x, w, offsets)
    ends = _check_ends(offsets, x.shape[0])
    pieces = []
    start = 0
    for expert, end in enumerate(ends):
        if end > start:
            pieces.append(x[start:end] @ w[expert])
        start = end
    if not pieces:  # no rows at all: an empty product that still belongs to the graph
        return x[:0] @ w[0]
    return torch.cat(pieces, dim=0)


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Multiply each expert's rows of `x` [T, K] by its weight `w[e]` [K, N]; returns [T, N].

    On CUDA the end offsets are not read back to the host (that would stall the
    stream), so there a last offset other than T is the caller's bug; on the CPU it is
    a ValueError.
    """
    _validate(x, w, offsets)
    if x.is_cuda and native_grouped_mm_applies(x, w):
        return torch._grouped_mm(x, w, offs=offsets.to(device=x.device, dtype=torch.int32))
    return grouped_mm_loop(x, w, offsets)


def grouped_mm_native(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """torch's fused grouped GEMM, on any device where it applies (ValueError otherwise)."""
    _validate(x, w, offsets)
    if not native_grouped_mm_applies(x, w):
        raise ValueError(
            "torch._grouped_mm needs bfloat16 operands on one device (CUDA sm90+ or CPU) "
            "with K and N multiples of 8; use grouped_mm, which falls back to a loop"
        )
    if not x.is_cuda:
        _check_ends(offsets, x.shape[0])
    return torch._grouped_mm(x, w, offs=offsets.to(device=x.device, dtype=torch.int32))


__all__ = ["grouped_mm", "grouped_mm_loop", "grouped_mm_native", "native_grouped_mm_applies"]
