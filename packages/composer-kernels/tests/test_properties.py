"""Property tests: dequantize(quantize(x)) stays within each format's error bound."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_kernels.formats import (
    E2M1,
    E4M3,
    E5M2,
    decode,
    decode_e8m0,
    encode,
    mx_quantize,
    nvfp4_quantize,
)
from composer_kernels.formats.elements import ElementFormat, decode_table

FINITE32 = st.floats(allow_nan=False, allow_infinity=False, width=32)
SETTINGS = settings(max_examples=150, deadline=None)


def _half_ulp(fmt: ElementFormat, y: torch.Tensor) -> torch.Tensor:
    """Half the spacing of `fmt`'s grid at |y| (|y| within range)."""
    mag = y.abs().double()
    exponent = torch.floor(torch.log2(mag.clamp(min=fmt.min_normal)))
    return 2.0 ** (exponent - fmt.mbits) / 2


@SETTINGS
@given(st.lists(FINITE32, min_size=1, max_size=64), st.sampled_from([E2M1, E4M3, E5M2]))
def test_element_encoding_is_the_nearest_code(values: list[float], fmt: ElementFormat) -> None:
    x = torch.tensor(values, dtype=torch.float32)
    got = decode(encode(x, fmt), fmt).double()
    table = decode_table(fmt).double()
    finite = table[torch.isfinite(table)]
    clamped = x.double().clamp(-fmt.max_value, fmt.max_value)
    best = (finite[None, :] - clamped[:, None]).abs().min(dim=1).values
    assert torch.equal((got - clamped).abs(), best)  # no code is closer
    in_range = x.abs() <= fmt.max_value
    assert ((got - x.double()).abs() <= _half_ulp(fmt, x))[in_range].all()


@SETTINGS
@given(st.lists(FINITE32, min_size=2, max_size=64), st.sampled_from([E2M1, E4M3, E5M2]))
def test_element_encoding_is_monotone(values: list[float], fmt: ElementFormat) -> None:
    x = torch.tensor(sorted(values), dtype=torch.float32)
    got = decode(encode(x, fmt), fmt)
    assert (got[1:] >= got[:-1]).all()


BLOCK_VALUES = st.lists(
    st.floats(min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, width=32),
    min_size=64,
    max_size=64,
)


@SETTINGS
@given(BLOCK_VALUES, st.sampled_from([E4M3, E5M2]), st.sampled_from(["floor", "rceil"]))
def test_mxfp8_error_is_within_half_an_element_ulp_times_the_scale(
    values: list[float], fmt: ElementFormat, rule: str
) -> None:
    x = torch.tensor(values, dtype=torch.float32).reshape(2, 32)
    q = mx_quantize(x, fmt, scale_rule=rule)  # type: ignore[arg-type]
    scale = decode_e8m0(q.scales).double().repeat_interleave(32, dim=-1)
    y = x.double() / scale
    bound = _half_ulp(fmt, y) * scale
    # The floor rule may saturate the block's largest values; rceil never does.
    saturation = (x.double().abs() - fmt.max_value * scale).clamp(min=0)
    if rule == "rceil":
        assert (saturation == 0).all()
    err = (q.dequantize().double() - x.double()).abs()
    assert (err <= bound + saturation).all()


@SETTINGS
@given(BLOCK_VALUES, st.sampled_from(["per_token", "per_tensor"]))
def test_nvfp4_error_is_within_half_an_e2m1_gap_times_the_block_scale(
    values: list[float], scale_mode: str
) -> None:
    x = torch.tensor(values, dtype=torch.float32).reshape(2, 32)
    q = nvfp4_quantize(x, scale_mode=scale_mode)  # type: ignore[arg-type]
    d = q.block_decode_scales().double().repeat_interleave(16, dim=-1)
    y = (x.double() / d).abs().nan_to_num(0.0)
    half_gap = torch.where(y < 2, 0.25, torch.where(y < 4, 0.5, 1.0))
    # E4M3 rounds the block scale, so a block's largest value can land just past 6 d.
    saturation = (x.double().abs() - 6 * d).clamp(min=0)
    # A block whose E4M3 scale underflows to 0 quantizes to 0: its values are below
    # half of E4M3's smallest subnormal scale: |x| <= 6 * 2^-10 * g.
    g = q.global_scale.double()
    # A row (or tensor) whose amax is below 2688 * 2^-149 has g = 0 and quantizes to 0.
    underflow = (d == 0) & ((x.double().abs() <= 6 * 2.0**-10 * g * 1.0001) | (g == 0))
    err = (q.dequantize().double() - x.double()).abs()
    ok = (err <= half_gap * d * (1 + 1e-6) + saturation) | underflow
    assert ok.all()
    # Saturation is at most E4M3's rounding of the block scale: half an ulp, 2^-4 of the
    # scale for normal E4M3 scales and 2^-10 for subnormal ones (with float32 slack), unless
    # g itself is a float32 subnormal (row amax below 2688 * 2^-126, about 3e-35).
    block_amax = x.double().abs().reshape(2, 2, 16).amax(-1).repeat_interleave(16, dim=-1)
    limit = torch.maximum(block_amax * 2.0**-4, 6 * g * 2.0**-10) * (1 + 1e-5)
    normal_g = (g >= 2.0**-126).expand_as(x)
    assert (saturation <= limit)[normal_g].all()
