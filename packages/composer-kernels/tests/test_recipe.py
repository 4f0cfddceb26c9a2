"""quantized_grouped_mm: exact emulation, gradients near high precision, batch invariance."""

from __future__ import annotations

import pytest
import torch

from composer_kernels import (
    grouped_mm,
    mx_fake_quantize,
    nvfp4_fake_quantize,
    quantized_grouped_mm,
)

ENDS = [20, 20, 70, 96]  # expert 1 has no tokens; group sizes are not multiples of 32


def _inputs(k: int = 64, n: int = 96, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ENDS[-1], k, generator=gen)
    w = torch.randn(len(ENDS), k, n, generator=gen) / k**0.5
    return x, w


def _explicit_forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xq = nvfp4_fake_quantize(x, scale_mode="per_token")
    wq = nvfp4_fake_quantize(w.transpose(1, 2), scale_mode="per_tensor").transpose(1, 2)
    rows, start = [], 0
    for e, end in enumerate(ENDS):
        if end > start:
            rows.append(xq[start:end] @ wq[e])
        start = end
    return torch.cat(rows)


def _mx(t: torch.Tensor, dim: int) -> torch.Tensor:
    return mx_fake_quantize(t, "e4m3", dim=dim, scale_rule="rceil")


def _pad_rows(t: torch.Tensor) -> torch.Tensor:
    extra = (-t.shape[0]) % 32
    return torch.cat([t, t.new_zeros(extra, t.shape[1])])


def test_forward_is_the_explicit_quantize_dequantize_matmul_bit_for_bit() -> None:
    x, w = _inputs()
    out = quantized_grouped_mm(x, w, torch.tensor(ENDS))
    assert torch.equal(out, _explicit_forward(x, w))


def test_backward_is_the_explicit_mxfp8_composition_bit_for_bit() -> None:
    x, w = _inputs()
    x.requires_grad_()
    w.requires_grad_()
    out = quantized_grouped_mm(x, w, torch.tensor(ENDS))
    dy = torch.randn_like(out)
    out.backward(dy)
    xq = nvfp4_fake_quantize(x.detach())
    wq = nvfp4_fake_quantize(w.detach().transpose(1, 2), scale_mode="per_tensor").transpose(1, 2)
    dyq, wq8 = _mx(dy, -1), _mx(wq, -1)
    start = 0
    for e, end in enumerate(ENDS):
        n = end - start
        if n == 0:
            assert torch.equal(w.grad[e], torch.zeros_like(w[e]))  # type: ignore[index]
            continue
        assert torch.equal(x.grad[start:end], dyq[start:end] @ wq8[e].T)  # type: ignore[index]
        xe = _mx(_pad_rows(xq[start:end]), 0)[:n]
        dye = _mx(_pad_rows(dy[start:end]), 0)[:n]
        assert torch.equal(w.grad[e], xe.T @ dye)  # type: ignore[index]
        start = end


def test_high_precision_wgrad_uses_the_dequantized_forward_activations() -> None:
    x, w = _inputs()
    w.requires_grad_()
    out = quantized_grouped_mm(x, w, torch.tensor(ENDS), high_precision_wgrad=True)
    dy = torch.randn_like(out)
    out.backward(dy)
    xq = nvfp4_fake_quantize(x)
    assert torch.equal(w.grad[2], xq[20:70].T @ dy[20:70])  # type: ignore[index]


def test_gradients_are_close_to_high_precision() -> None:
    """Stated tolerances (relative Frobenius error against float32 grouped_mm): 4-bit
    forward operands give ~0.1 per operand; we allow 0.2 for the output and gradients."""
    x, w = _inputs(seed=3)
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    offsets = torch.tensor(ENDS)
    out = quantized_grouped_mm(xs, ws, offsets)
    ref = grouped_mm(xr, wr, offsets)
    dy = torch.randn_like(ref)
    out.backward(dy)
    ref.backward(dy)

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).detach().norm() / b.detach().norm())

    assert rel(out, ref) < 0.2
    assert rel(xs.grad, xr.grad) < 0.2  # type: ignore[arg-type]
    assert rel(ws.grad, wr.grad) < 0.2  # type: ignore[arg-type]
    # And clearly not exact: the quantization is really there.
    assert rel(out, ref) > 0.01


def test_a_tokens_output_does_not_depend_on_the_other_tokens() -> None:
    x, w = _inputs()
    other = x.clone()
    other[1:] *= 30.0
    offsets = torch.tensor(ENDS)
    assert torch.equal(
        quantized_grouped_mm(x, w, offsets)[0], quantized_grouped_mm(other, w, offsets)[0]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_odd_sizes_are_padded_and_dtypes_are_kept(dtype: torch.dtype) -> None:
    x, w = _inputs(k=24, n=40)
    x, w = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
    out = quantized_grouped_mm(x, w, torch.tensor(ENDS))
    assert out.shape == (96, 40) and out.dtype == dtype
    out.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == dtype and torch.isfinite(x.grad.float()).all()
    assert w.grad is not None and w.grad.dtype == dtype


def test_bad_offsets_are_a_clear_error() -> None:
    x, w = _inputs()
    with pytest.raises(ValueError, match="offsets end at"):
        quantized_grouped_mm(x, w, torch.tensor([10, 20, 30, 40]))
