"""Bit-exact element codecs: every code, ties, saturation, NaN, ±0, subnormals, E8M0."""

from __future__ import annotations

import math

import pytest
import torch

from composer_kernels.formats import (
    E2M1,
    E4M3,
    E5M2,
    decode,
    decode_e8m0,
    encode,
    encode_e5m2,
    encode_e8m0,
)
from composer_kernels.formats.elements import ElementFormat

FORMATS = [E2M1, E4M3, E5M2]


def _bits_to_f32(bits: list[int]) -> torch.Tensor:
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_code_round_trips(fmt: ElementFormat) -> None:
    codes = torch.arange(1 << fmt.bits, dtype=torch.uint8)
    values = decode(codes, fmt)
    again = encode(values, fmt, saturate=False)
    nan = torch.isnan(values)
    assert torch.equal(again[~nan], codes[~nan])
    if fmt.nan_code is not None:
        assert torch.all(again[nan] == fmt.nan_code)
    else:
        assert not nan.any()


def test_decoded_values_match_the_spec_tables() -> None:
    e2m1 = decode(torch.arange(16, dtype=torch.uint8), E2M1).tolist()
    assert e2m1[:8] == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert e2m1[8:] == [-v for v in e2m1[:8]]
    assert math.copysign(1.0, e2m1[8]) == -1.0  # 0b1000 is -0
    assert E4M3.max_value == 448.0 and E4M3.min_subnormal == 2.0**-9
    assert E5M2.max_value == 57344.0 and E5M2.min_subnormal == 2.0**-16
    assert decode(torch.tensor([0x7C, 0xFC], dtype=torch.uint8), E5M2).tolist() == [
        math.inf,
        -math.inf,
    ]
    assert torch.isnan(decode(torch.tensor([0x7F, 0xFF], dtype=torch.uint8), E4M3)).all()


@pytest.mark.parametrize(
    ("fmt", "dtype"), [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)], ids=["e4m3", "e5m2"]
)
def test_decode_matches_torch_float8(fmt: ElementFormat, dtype: torch.dtype) -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    ours, theirs = decode(codes, fmt), codes.view(dtype).float()
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    finite = ~torch.isnan(ours)
    assert torch.equal(ours[finite].view(torch.int32), theirs[finite].view(torch.int32))


@pytest.mark.parametrize(
    ("fmt", "dtype"), [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)], ids=["e4m3", "e5m2"]
)
def test_encode_matches_torch_cast_on_in_range_values(
    fmt: ElementFormat, dtype: torch.dtype
) -> None:
    """torch's float8 cast rounds to nearest even; in range, ours must agree bit for bit."""
    gen = torch.Generator().manual_seed(0)
    random_bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=gen, dtype=torch.int32)
    x = torch.cat(
        [
            random_bits.view(torch.float32),
            torch.randn(50_000, generator=gen) * fmt.max_value / 4,
            torch.randn(50_000, generator=gen) * fmt.min_normal,
        ]
    )
    x = x[torch.isfinite(x) & (x.abs() <= fmt.max_value)]
    assert torch.equal(encode(x, fmt), x.to(dtype).view(torch.uint8))


def _midpoints(fmt: ElementFormat) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact midpoints between consecutive positive finite values, and the codes either side."""
    codes = torch.arange(fmt.max_code + 1)
    values = decode(codes.to(torch.uint8), fmt).double()
    mids = ((values[:-1] + values[1:]) / 2).float()
    assert torch.equal(mids.double(), (values[:-1] + values[1:]) / 2)  # representable
    return mids, codes[:-1], codes[1:]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_ties_round_to_even_and_neighbours_round_to_nearest(fmt: ElementFormat) -> None:
    mids, lower, upper = _midpoints(fmt)
    expected = torch.where(lower % 2 == 0, lower, upper).to(torch.uint8)
    assert torch.equal(encode(mids, fmt), expected)
    assert torch.equal(encode(-mids, fmt), expected | fmt.sign_bit)
    just_below = torch.nextafter(mids, torch.zeros_like(mids))
    just_above = torch.nextafter(mids, torch.full_like(mids, math.inf))
    assert torch.equal(encode(just_below, fmt), lower.to(torch.uint8))
    assert torch.equal(encode(just_above, fmt), upper.to(torch.uint8))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_saturation_inf_and_nan(fmt: ElementFormat) -> None:
    big = torch.tensor([fmt.max_value * 1.5, 1e30, math.inf, -math.inf, -1e30])
    max_code, sign = fmt.max_code, fmt.sign_bit
    assert encode(big, fmt, saturate=True).tolist() == [max_code] * 3 + [max_code | sign] * 2
    nan = encode(torch.tensor([math.nan]), fmt)
    assert nan.item() == (fmt.nan_code if fmt.nan_code is not None else 0)


def test_e5m2_overflows_to_inf_like_ieee_unless_saturating() -> None:
    # 61440 is the midpoint between 57344 (odd mantissa) and 2^16 (would be Inf): ties go up.
    x = torch.tensor([61439.0, 61440.0, 1e6, math.inf, -math.inf])
    assert encode_e5m2(x).tolist() == [0x7B, 0x7C, 0x7C, 0x7C, 0xFC]
    assert encode_e5m2(x, saturate=True).tolist() == [0x7B, 0x7B, 0x7B, 0x7B, 0xFB]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_signed_zero_and_subnormals_are_kept(fmt: ElementFormat) -> None:
    assert encode(torch.tensor([0.0, -0.0]), fmt).tolist() == [0, fmt.sign_bit]
    sub = fmt.min_subnormal
    x = torch.tensor([sub, -sub, sub / 2, sub * 0.50001, sub * 1.5, sub * 2.5])
    # sub/2 ties to even (0); just above half rounds up; 1.5 sub ties to 2 sub; 2.5 sub to 2 sub.
    expected = [1, 1 | fmt.sign_bit, 0, 1, 2, 2] if fmt.mbits > 1 else [1, 9, 0, 1, 2, 2]
    assert encode(x, fmt).tolist() == expected
    assert decode(torch.tensor([1], dtype=torch.uint8), fmt).item() == sub


def test_float32_subnormal_inputs_encode_without_flushing() -> None:
    # 2^-149 is far below every element format's grid: it rounds to +0, not to NaN or garbage.
    tiny = _bits_to_f32([1, 0x80000001])
    for fmt in FORMATS:
        assert encode(tiny, fmt).tolist() == [0, fmt.sign_bit]


def test_e8m0_every_code_round_trips() -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    values = decode_e8m0(codes)
    assert torch.isnan(values[255])
    expected = [2.0 ** (c - 127) for c in range(255)]
    assert values[:255].double().tolist() == expected  # 2^-127 is a float32 subnormal
    for rounding in ("floor", "ceil"):
        assert torch.equal(encode_e8m0(values[:255], rounding), codes[:255])  # type: ignore[arg-type]


def test_e8m0_floor_and_ceil_between_powers_and_at_the_edges() -> None:
    x = torch.tensor([3.0, 0.75, 2.0**-127 * 1.5, 2.0**-130, 0.0, 2.0**127 * 1.5, math.inf])
    assert encode_e8m0(x, "floor").tolist() == [128, 126, 0, 0, 0, 254, 254]
    assert encode_e8m0(x, "ceil").tolist() == [129, 127, 1, 0, 0, 254, 254]
    assert encode_e8m0(torch.tensor([math.nan, -1.0])).tolist() == [255, 255]
    with pytest.raises(ValueError, match="rounding"):
        encode_e8m0(x, "nearest")  # type: ignore[arg-type]


def test_unknown_format_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="e4m3"):
        encode(torch.zeros(1), "e3m4")


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_fast_fp8_cast_equals_the_bit_level_encoder_everywhere(fmt: ElementFormat) -> None:
    """MX quantization casts through torch after a clamp; that must be `encode` exactly."""
    from composer_kernels.formats.mx import cast_fp8_saturating

    gen = torch.Generator().manual_seed(5)
    bits = torch.randint(-(2**31), 2**31 - 1, (300_000,), generator=gen, dtype=torch.int32)
    mids, _, _ = _midpoints(fmt)
    x = torch.cat(
        [
            bits.view(torch.float32),
            mids,
            -mids,
            torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, fmt.max_value * 1.01]),
        ]
    )
    fast = cast_fp8_saturating(x, fmt).view(torch.uint8)
    exact = encode(x, fmt, saturate=True)
    nan = torch.isnan(x)
    assert torch.equal(fast[~nan], exact[~nan])
    assert torch.isnan(decode(fast[nan], fmt)).all()
