"""MXFP8 tokens for the expert-parallel all-to-all.

Before dispatch each token is quantized to MXFP8 (E4M3, blocks of 32 along the hidden
dimension, so a token's scales travel with it and depend on it alone); the receiver
dequantizes before the expert GEMM. That halves the dispatch bytes against bf16
(1 byte an element + 1 scale byte per 32). The combine (expert outputs back to their
tokens) stays in bf16, as in the Composer report.

`dispatch_quantize` / `dispatch_dequantize` give the tensors that go over the wire;
`fake_quantize_for_dispatch` is the same round trip as one differentiable op whose
gradient passes straight through (the gradient of dispatch is a combine, in bf16).
"""

from __future__ import annotations

from typing import Any

import torch

from composer_kernels.formats.elements import decode_e8m0
from composer_kernels.formats.mx import MX_BLOCK_SIZE, ScaleRule, mx_quantize

DISPATCH_SCALE_RULE: ScaleRule = "rceil"


def dispatch_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens [T, H] -> (data uint8 [T, H] E4M3 codes, scales uint8 [T, H/32] E8M0 codes).

    Both are plain uint8 tensors, which any all-to-all (NCCL, gloo, DeepEP) can move.
    """
    if x.dim() != 2:
        raise ValueError(f"dispatch_quantize wants tokens [T, H]; got {tuple(x.shape)}")
    if x.shape[1] % MX_BLOCK_SIZE != 0:
        raise ValueError(
            f"the hidden size ({x.shape[1]}) must be a multiple of {MX_BLOCK_SIZE} for MXFP8 dispatch"
        )
    q = mx_quantize(x, "e4m3", dim=-1, scale_rule=DISPATCH_SCALE_RULE)
    return q.data.view(torch.uint8), q.scales


def dispatch_dequantize(
    data: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Inverse of `dispatch_quantize` on the receiving rank."""
    if data.shape[-1] != scales.shape[-1] * MX_BLOCK_SIZE:
        raise ValueError(
            f"data [.., {data.shape[-1]}] and scales [.., {scales.shape[-1]}] do not match "
            f"(expected {MX_BLOCK_SIZE} elements per scale)"
        )
    values = data.view(torch.float8_e4m3fn).float()
    scale = decode_e8m0(scales).repeat_interleave(MX_BLOCK_SIZE, dim=-1)
    return (values * scale).to(dtype)


class _DispatchRoundTrip(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        data, scales = dispatch_quantize(x)
        return dispatch_dequantize(data, scales, x.dtype)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> torch.Tensor:
        return grads[0]


def fake_quantize_for_dispatch(x: torch.Tensor) -> torch.Tensor:
    """What the experts see after an MXFP8 dispatch; straight-through gradient."""
    out: torch.Tensor = _DispatchRoundTrip.apply(x)
    return out


__all__ = ["dispatch_dequantize", "dispatch_quantize", "fake_quantize_for_dispatch"]
