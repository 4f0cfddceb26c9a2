"""The Composer MoE recipe: NVFP4 forward, MXFP8 backward, as one autograd function.

Forward: activations in NVFP4 with a per-token second-level scale (a token's
quantization does not depend on the rest of the batch), expert weights in NVFP4 with
one second-level scale per expert, blocks of 16 along the reduction dimension K.

Backward: the output gradient and both operands in MXFP8 (E4M3 elements, RCEIL
scales, blocks of 32 along each GEMM's reduction dimension). The operands are built
from the dequantized forward values, so backward differentiates the function that
forward actually computed. `high_precision_wgrad=True` keeps the weight-gradient GEMM
in float32 (still from the dequantized forward activations).

The quantizers are treated as the identity for gradients (straight-through).

On every device this is an exact emulation: quantize, dequantize, accumulate in
float32, with the same per-expert products a scaled grouped GEMM computes (up to the
order of the float32 sums inside the hardware's MMA).
"""

from __future__ import annotations

from typing import Any

import torch

from composer_kernels.formats.mx import MX_BLOCK_SIZE, ScaleRule, mx_fake_quantize
from composer_kernels.formats.nvfp4 import NVFP4_BLOCK_SIZE, nvfp4_fake_quantize
from composer_kernels.gemm._padding import with_padding
from composer_kernels.grouped_mm import grouped_mm_loop

BACKWARD_ELEMENT = "e4m3"
BACKWARD_SCALE_RULE: ScaleRule = "rceil"


def nvfp4_activation(x: torch.Tensor) -> torch.Tensor:
    """Per-token NVFP4 fake quantization of [T, K] along K (float32)."""
    return with_padding(
        x, -1, NVFP4_BLOCK_SIZE, lambda t: nvfp4_fake_quantize(t, scale_mode="per_token")
    )


def nvfp4_expert_weights(w: torch.Tensor) -> torch.Tensor:
    """NVFP4 fake quantization of [E, K, N] along K, one second-level scale per expert."""
    wt = w.transpose(-1, -2)  # [E, N, K]: blocks along the reduction dimension
    q = with_padding(
        wt, -1, NVFP4_BLOCK_SIZE, lambda t: nvfp4_fake_quantize(t, scale_mode="per_tensor")
    )
    return q.transpose(-1, -2)


def mxfp8(x: torch.Tensor, dim: int) -> torch.Tensor:
    """MXFP8 (E4M3, RCEIL) fake quantization with blocks of 32 along `dim` (zero-padded)."""
    return with_padding(
        x,
        dim,
        MX_BLOCK_SIZE,
        lambda t: mx_fake_quantize(t, BACKWARD_ELEMENT, dim=dim, scale_rule=BACKWARD_SCALE_RULE),
    )


def _wgrad(
    xq: torch.Tensor, dy: torch.Tensor, ends: list[int], experts: int, high_precision: bool
) -> torch.Tensor:
    """dw[e] = x_e^T dy_e over expert e's tokens; MXFP8 blocks run along the tokens of one
    expert only (a block never straddles two experts' GEMMs)."""
    dw = xq.new_zeros(experts, xq.shape[1], dy.shape[1])
    start = 0
    for expert, end in enumerate(ends):
        if end > start:
            xe, dye = xq[start:end], dy[start:end]
            if not high_precision:
                xe, dye = mxfp8(xe, 0), mxfp8(dye, 0)
            dw[expert] = xe.T @ dye
        start = end
    return dw


class NVFP4ForwardMXFP8Backward(torch.autograd.Function):
    """grouped_mm with the Composer low-precision recipe (see the module docstring)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        w: torch.Tensor,
        offsets: torch.Tensor,
        high_precision_wgrad: bool,
    ) -> torch.Tensor:
        xq = nvfp4_activation(x)
        wq = nvfp4_expert_weights(w)
        y = grouped_mm_loop(xq, wq, offsets)
        ctx.save_for_backward(xq, wq, offsets)
        ctx.high_precision_wgrad = high_precision_wgrad
        ctx.dtypes = (x.dtype, w.dtype)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad_out,) = grads
        xq, wq, offsets = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        dy = grad_out.float()
        ends = [int(e) for e in offsets.tolist()]
        dx = dw = None
        if ctx.needs_input_grad[0]:
            # dx = dy @ w^T reduces over N: MXFP8 blocks along N for both operands.
            dx = grouped_mm_loop(mxfp8(dy, -1), mxfp8(wq, -1).transpose(-1, -2), offsets)
            dx = dx.to(x_dtype)
        if ctx.needs_input_grad[1]:
            dw = _wgrad(xq, dy, ends, wq.shape[0], ctx.high_precision_wgrad).to(w_dtype)
        return dx, dw, None, None


def quantized_grouped_mm(
    x: torch.Tensor,
    w: torch.Tensor,
    offsets: torch.Tensor,
    *,
    high_precision_wgrad: bool = False,
) -> torch.Tensor:
    """`grouped_mm` (x [T, K], w [E, K, N], offsets [E] cumulative row ends) in the
    NVFP4-forward / MXFP8-backward recipe; returns [T, N] in x's dtype."""
    from composer_kernels.grouped_mm import _check_ends, _validate

    _validate(x, w, offsets)
    if x.device.type == "cpu":
        _check_ends(offsets, x.shape[0])
    out: torch.Tensor = NVFP4ForwardMXFP8Backward.apply(x, w, offsets, high_precision_wgrad)
    return out


__all__ = [
    "NVFP4ForwardMXFP8Backward",
    "mxfp8",
    "nvfp4_activation",
    "nvfp4_expert_weights",
    "quantized_grouped_mm",
]
