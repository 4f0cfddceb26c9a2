"""MXFP8 linear layer for the non-expert layers (attention projections, dense MLPs).

y = x W^T + b with every GEMM operand in MXFP8 (E4M3 elements, E8M0 scales, blocks of
32 along that GEMM's reduction dimension), the way a Blackwell MXFP8 GEMM consumes them:

- forward  y  = x W^T     blocks along K for x and W
- dgrad    dx = dy W      blocks along N for dy and W
- wgrad    dW = dy^T x    blocks along the tokens for dy and x

Each operand is quantized separately for each GEMM (a block must run along the
reduction dimension), so backward quantizes the high-precision x and W again. This is
an exact emulation in float32; dimensions that are not multiples of 32 are zero-padded,
which changes nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from composer_kernels.gemm.recipe import mxfp8


class MXFP8LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).float()
        w = weight.float()
        y = mxfp8(x2, -1) @ mxfp8(w, -1).T
        if bias is not None:
            y = y + bias.float()
        ctx.save_for_backward(x2, w)
        ctx.meta = (x.shape, x.dtype, weight.dtype, bias is not None)
        return y.reshape(*x.shape[:-1], weight.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad_out,) = grads
        x2, w = ctx.saved_tensors
        x_shape, x_dtype, w_dtype, has_bias = ctx.meta
        dy = grad_out.reshape(-1, grad_out.shape[-1]).float()
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = (mxfp8(dy, -1) @ mxfp8(w, 0)).reshape(x_shape).to(x_dtype)
        if ctx.needs_input_grad[1]:
            dw = (mxfp8(dy, 0).T @ mxfp8(x2, 0)).to(w_dtype)
        if has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(0).to(w_dtype)
        return dx, dw, db


def mxfp8_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """`F.linear` with MXFP8 operands in forward and backward (x [..., K], weight [N, K])."""
    if x.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"x has {x.shape[-1]} input features but weight expects {weight.shape[-1]}"
        )
    out: torch.Tensor = MXFP8LinearFunction.apply(x, weight, bias)
    return out


class MXFP8Linear(nn.Linear):
    """Drop-in `nn.Linear` whose matmuls run in MXFP8 (weights stay high precision)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mxfp8_linear(x, self.weight, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> MXFP8Linear:
        """Same parameters (shared, not copied), MXFP8 matmuls."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        return new


__all__ = ["MXFP8Linear", "MXFP8LinearFunction", "mxfp8_linear"]
