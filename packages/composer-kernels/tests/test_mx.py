"""MXFP8: scale rules, blocks along any dimension, NaN blocks, and agreement with torchao."""

from __future__ import annotations

import math

import pytest
import torch

from composer_kernels.formats import E4M3, E5M2, decode_e8m0, mx_quantize
from composer_kernels.formats.mx import mx_scale_codes


def test_floor_rule_is_the_ocp_spec_and_rceil_never_saturates() -> None:
    amax = torch.tensor([448.0, 449.0, 500.0, 1.0, 2.0**-140, 0.0])
    # floor: 2^(floor(log2 amax) - 8); 449 -> 2^0 so 449 saturates to 448.
    assert mx_scale_codes(amax, E4M3, "floor").tolist() == [127, 127, 127, 119, 0, 0]
    # rceil: smallest 2^k >= amax / 448.
    assert mx_scale_codes(amax, E4M3, "rceil").tolist() == [127, 128, 128, 119, 0, 0]
    assert mx_scale_codes(torch.tensor([57344.0]), E5M2, "rceil").tolist() == [127]
    x = torch.full((32,), 480.0)
    assert mx_quantize(x, scale_rule="floor").dequantize().max().item() == 448.0  # saturated
    assert mx_quantize(x, scale_rule="rceil").dequantize().max().item() == 480.0  # 2 * 240


def test_blocks_follow_the_chosen_dimension() -> None:
    x = torch.randn(64, 96)
    x[:, 0] *= 1000  # one loud column
    along_rows = mx_quantize(x, dim=0)
    along_cols = mx_quantize(x, dim=-1)
    assert along_rows.scales.shape == (2, 96)
    assert along_cols.scales.shape == (64, 3)
    # Quantizing along dim 0 equals quantizing the transpose along its last dim.
    t = mx_quantize(x.T.contiguous(), dim=-1)
    assert torch.equal(along_rows.scales, t.scales.T)
    assert torch.equal(along_rows.data.view(torch.uint8), t.data.view(torch.uint8).T)


def test_dequantized_values_are_element_times_power_of_two_scale() -> None:
    x = torch.randn(4, 64) * 10
    q = mx_quantize(x, "e5m2", scale_rule="rceil")
    scale = decode_e8m0(q.scales).repeat_interleave(32, dim=-1)
    assert torch.equal(q.dequantize(), q.data.float() * scale)
    rel = ((q.dequantize() - x).abs() / x.abs().clamp(min=1e-3)).max()
    assert rel <= 2.0**-3  # E5M2 keeps 2 mantissa bits: half-ulp relative error 2^-3


def test_nan_or_inf_block_becomes_nan_and_others_are_untouched() -> None:
    x = torch.randn(2, 64)
    x[0, 3] = math.nan
    x[1, 40] = math.inf
    q = mx_quantize(x)
    assert q.scales.tolist() == [[255, q.scales[0, 1].item()], [q.scales[1, 0].item(), 255]]
    out = q.dequantize()
    assert torch.isnan(out[0, :32]).all() and torch.isnan(out[1, 32:]).all()
    assert torch.isfinite(out[0, 32:]).all() and torch.isfinite(out[1, :32]).all()


def test_bad_shapes_and_formats_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="multiple of the block size"):
        mx_quantize(torch.zeros(4, 48))
    with pytest.raises(ValueError, match="e4m3 or e5m2"):
        mx_quantize(torch.zeros(4, 64), "e2m1")
    with pytest.raises(ValueError, match="scale_rule"):
        mx_quantize(torch.zeros(4, 64), scale_rule="even")  # type: ignore[arg-type]


@pytest.mark.parametrize("elem", ["e4m3", "e5m2"])
@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bits_agree_with_torchao(elem: str, rule: str, dtype: torch.dtype) -> None:
    """torchao's `to_mx` implements the same FLOOR and RCEIL rules; scales and elements
    must agree bit for bit (over 12 decades of magnitude)."""
    mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    config = pytest.importorskip("torchao.prototype.mx_formats.config")
    mode = {"floor": config.ScaleCalculationMode.FLOOR, "rceil": config.ScaleCalculationMode.RCEIL}
    torch_dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[elem]
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(128, 512, generator=gen) * torch.logspace(-6, 6, 512)).to(dtype)
    x[0, :32] = 0.0  # an all-zero block
    theirs_scale, theirs_data = mx_tensor.to_mx(x, torch_dtype, 32, mode[rule])
    ours = mx_quantize(x, elem, scale_rule=rule)  # type: ignore[arg-type]
    assert torch.equal(ours.scales, theirs_scale.view(torch.uint8))
    assert torch.equal(ours.data.view(torch.uint8), theirs_data.view(torch.uint8))
