"""MXFP8 linear (exact emulation, gradients) and the MXFP8 token codec for EP dispatch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from composer_kernels import (
    MXFP8Linear,
    dispatch_dequantize,
    dispatch_quantize,
    fake_quantize_for_dispatch,
    mx_fake_quantize,
    mxfp8_linear,
)


def _mx(t: torch.Tensor, dim: int) -> torch.Tensor:
    return mx_fake_quantize(t, "e4m3", dim=dim, scale_rule="rceil")


def test_linear_forward_and_backward_are_the_explicit_composition() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, 64, generator=gen, requires_grad=True)
    w = torch.randn(96, 64, generator=gen, requires_grad=True)
    b = torch.randn(96, generator=gen, requires_grad=True)
    out = mxfp8_linear(x, w, b)
    x2 = x.detach().reshape(64, 64)
    assert torch.equal(out.reshape(64, 96), _mx(x2, -1) @ _mx(w.detach(), -1).T + b.detach())
    dy = torch.randn_like(out)
    out.backward(dy)
    dy2 = dy.reshape(64, 96)
    assert torch.equal(x.grad.reshape(64, 64), _mx(dy2, -1) @ _mx(w.detach(), 0))  # type: ignore[union-attr]
    assert torch.equal(w.grad, _mx(dy2, 0).T @ _mx(x2, 0))  # type: ignore[arg-type]
    assert torch.equal(b.grad, dy2.sum(0))  # type: ignore[arg-type]


def test_linear_is_close_to_high_precision_and_the_module_shares_parameters() -> None:
    """Stated tolerance: E4M3 keeps 3 mantissa bits; relative error of outputs and
    gradients below 0.06 against float32."""
    torch.manual_seed(0)
    dense = nn.Linear(48, 40)  # not multiples of 32: zero padding
    mx = MXFP8Linear.from_linear(dense)
    assert mx.weight is dense.weight
    x = torch.randn(50, 48, requires_grad=True)
    out, ref = mx(x), dense(x)
    rel = float((out - ref).detach().norm() / ref.detach().norm())
    assert 1e-4 < rel < 0.06
    g = torch.randn_like(ref)
    (gx_mx, gw_mx) = torch.autograd.grad(out, (x, dense.weight), g)
    (gx, gw) = torch.autograd.grad(ref, (x, dense.weight), g)
    assert float((gx_mx - gx).norm() / gx.norm()) < 0.06
    assert float((gw_mx - gw).norm() / gw.norm()) < 0.06
    with pytest.raises(ValueError, match="input features"):
        mxfp8_linear(torch.randn(3, 5), dense.weight)


def test_dispatch_codec_round_trip_bytes_and_token_independence() -> None:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(10, 128, generator=gen) * 5).bfloat16()
    data, scales = dispatch_quantize(x)
    assert data.dtype == torch.uint8 and data.shape == (10, 128)
    assert scales.dtype == torch.uint8 and scales.shape == (10, 4)
    assert data.numel() + scales.numel() < x.numel() * x.element_size() * 0.6
    back = dispatch_dequantize(data, scales)
    assert back.dtype == torch.bfloat16
    assert torch.equal(back, _mx(x.float(), -1).bfloat16())
    other = x.clone()
    other[1:] *= 100
    assert torch.equal(dispatch_quantize(other)[0][0], data[0])
    with pytest.raises(ValueError, match="multiple of 32"):
        dispatch_quantize(torch.randn(4, 40))
    with pytest.raises(ValueError, match="do not match"):
        dispatch_dequantize(data, scales[:, :2])


def test_dispatch_round_trip_has_a_straight_through_gradient() -> None:
    x = torch.randn(4, 64, requires_grad=True)
    out = fake_quantize_for_dispatch(x)
    assert torch.equal(out, _mx(x.detach(), -1))
    g = torch.randn(4, 64)
    (gx,) = torch.autograd.grad(out, x, g)
    assert torch.equal(gx, g)
    assert not torch.equal(F.mse_loss(out, x), torch.tensor(0.0))
