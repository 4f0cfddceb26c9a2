"""grouped_mm: native fused path and loop agree, gradients flow, bad offsets are errors."""

from __future__ import annotations

import pytest
import torch

from composer_kernels import grouped_mm
from composer_kernels.grouped_mm import (
    grouped_mm_loop,
    grouped_mm_native,
    native_grouped_mm_applies,
)


def _reference(x: torch.Tensor, w: torch.Tensor, ends: list[int]) -> torch.Tensor:
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    start = 0
    for e, end in enumerate(ends):
        out[start:end] = x[start:end].double() @ w[e].double()
        start = end
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_per_expert_reference_with_gradients(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    ends = [5, 5, 17, 40]  # expert 1 gets no tokens
    x = torch.randn(40, 32, generator=gen).to(dtype).requires_grad_()
    w = torch.randn(4, 32, 24, generator=gen).to(dtype).requires_grad_()
    out = grouped_mm(x, w, torch.tensor(ends))
    assert out.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    assert torch.allclose(out.double(), _reference(x, w, ends), atol=tol, rtol=tol)
    grad = torch.randn(40, 24, generator=gen).to(dtype)
    out.backward(grad)
    xr = x.detach().double().requires_grad_()
    wr = w.detach().double().requires_grad_()
    _reference(xr, wr, ends).backward(grad.double())
    assert torch.allclose(x.grad.double(), xr.grad, atol=tol * 10, rtol=tol)  # type: ignore[union-attr]
    assert torch.allclose(w.grad.double(), wr.grad, atol=tol * 10, rtol=tol)  # type: ignore[union-attr]
    assert w.grad[1].abs().sum() == 0  # type: ignore[index]


def test_native_grouped_gemm_agrees_with_the_loop_including_gradients() -> None:
    x = torch.randn(64, 32).bfloat16().requires_grad_()
    w = torch.randn(3, 32, 16).bfloat16().requires_grad_()
    offsets = torch.tensor([10, 10, 64])
    if not native_grouped_mm_applies(x, w):
        pytest.skip("this torch has no CPU grouped GEMM")
    native = grouped_mm_native(x, w, offsets)
    loop = grouped_mm_loop(x, w, offsets)
    torch.testing.assert_close(native, loop)
    g = torch.randn_like(loop)
    for a, b in zip(
        torch.autograd.grad(native, (x, w), g), torch.autograd.grad(loop, (x, w), g), strict=True
    ):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
    with pytest.raises(ValueError, match="bfloat16"):
        grouped_mm_native(x.float(), w.float(), offsets)


def test_bad_offsets_and_shapes_are_clear_errors() -> None:
    x, w = torch.randn(10, 8), torch.randn(2, 8, 4)
    with pytest.raises(ValueError, match="end at 9"):
        grouped_mm(x, w, torch.tensor([4, 9]))
    with pytest.raises(ValueError, match="not decrease"):
        grouped_mm(x, w, torch.tensor([6, 4]))
    with pytest.raises(ValueError, match="one end offset per expert"):
        grouped_mm(x, w, torch.tensor([10]))
    with pytest.raises(ValueError, match="inner dimensions"):
        grouped_mm(x, torch.randn(2, 6, 4), torch.tensor([4, 10]))
    with pytest.raises(ValueError, match="integers"):
        grouped_mm(x, w, torch.tensor([4.0, 10.0]))


def test_no_rows_gives_an_empty_result() -> None:
    out = grouped_mm(torch.randn(0, 8), torch.randn(2, 8, 4), torch.tensor([0, 0]))
    assert out.shape == (0, 4)
