"""Bit-exact encode and decode of the small floating-point element formats.

E2M1 (FP4), E4M3 and E5M2 (FP8), and the E8M0 power-of-two scale, as the OCP
Microscaling (MX) v1.0 and OCP FP8 specifications define them:

| format | bias | largest finite | smallest subnormal | Inf | NaN |
| --- | --- | --- | --- | --- | --- |
| E2M1 | 1 | 6 | 0.5 | no | no |
| E4M3 | 7 | 448 | 2^-9 | no | S.1111.111 |
| E5M2 | 15 | 57344 | 2^-16 | S.11111.00 | S.11111.{01,10,11} |
| E8M0 | 127 | 2^127 | (2^-127, no zero) | no | 0xFF |

Encoding rounds to nearest, ties to even, and keeps subnormals (no flush to zero).
The rounding is done with integer arithmetic on the float32 bit pattern, not with
a cast, so the result does not depend on what the host's or the device's cast
happens to do with ties, overflow or subnormals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

_F32_MANTISSA_BITS = 23
_F32_BIAS = 127


@dataclass(frozen=True)
class ElementFormat:
    """A sign-exponent-mantissa element format narrower than float32."""

    name: str
    ebits: int
    mbits: int
    bias: int
    max_code: int
    """The magnitude code of the largest finite value."""
    inf_code: int | None
    """The magnitude code of infinity, or None when the format has no infinity."""
    nan_code: int | None
    """The canonical NaN magnitude code, or None when the format has no NaN."""

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def max_value(self) -> float:
        return _code_value(self, self.max_code)

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mbits)

    @property
    def emax(self) -> int:
        """floor(log2(max_value)): the exponent the MX scale rule subtracts."""
        return (self.max_code >> self.mbits) - self.bias


E2M1 = ElementFormat("e2m1", ebits=2, mbits=1, bias=1, max_code=0x7, inf_code=None, nan_code=None)
E4M3 = ElementFormat("e4m3", ebits=4, mbits=3, bias=7, max_code=0x7E, inf_code=None, nan_code=0x7F)
E5M2 = ElementFormat("e5m2", ebits=5, mbits=2, bias=15, max_code=0x7B, inf_code=0x7C, nan_code=0x7F)

FORMATS: dict[str, ElementFormat] = {f.name: f for f in (E2M1, E4M3, E5M2)}


def element_format(name: str | ElementFormat) -> ElementFormat:
    """Look a format up by name ("e2m1", "e4m3", "e5m2")."""
    if isinstance(name, ElementFormat):
        return name
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown element format {name!r}; choose one of {sorted(FORMATS)}"
        ) from None


def _code_value(fmt: ElementFormat, magnitude_code: int) -> float:
    exponent = magnitude_code >> fmt.mbits
    mantissa = magnitude_code & ((1 << fmt.mbits) - 1)
    if fmt.nan_code is not None and magnitude_code >= fmt.nan_code:
        return float("nan")
    if fmt.inf_code is not None and magnitude_code == fmt.inf_code:
        return float("inf")
    if fmt.inf_code is not None and magnitude_code > fmt.inf_code:
        return float("nan")
    if exponent == 0:
        return mantissa * 2.0 ** (1 - fmt.bias - fmt.mbits)
    return (1 + mantissa / (1 << fmt.mbits)) * 2.0 ** (exponent - fmt.bias)


_LUT_CACHE: dict[tuple[str, torch.device], torch.Tensor] = {}


def decode_table(fmt: ElementFormat, device: torch.device | str = "cpu") -> torch.Tensor:
    """float32 value of every code of `fmt`, indexed by code (sign bit included)."""
    fmt = element_format(fmt)
    device = torch.device(device)
    key = (fmt.name, device)
    if key not in _LUT_CACHE:
        half = 1 << (fmt.bits - 1)
        values = [_code_value(fmt, c) for c in range(half)]
        values += [-v for v in values]
        _LUT_CACHE[key] = torch.tensor(values, dtype=torch.float32, device=device)
    return _LUT_CACHE[key]


def decode(codes: torch.Tensor, fmt: str | ElementFormat) -> torch.Tensor:
    """Decode integer codes (uint8, one code per element) to float32."""
    fmt = element_format(fmt)
    return decode_table(fmt, codes.device)[codes.long()]


def encode(x: torch.Tensor, fmt: str | ElementFormat, *, saturate: bool = True) -> torch.Tensor:
    """Encode `x` to `fmt`: round to nearest even, subnormals kept; returns uint8 codes.

    Overflow saturates to the largest finite value. A format with infinity (E5M2)
    maps overflow and ±Inf to ±Inf instead when `saturate=False`; formats without
    infinity always saturate. NaN becomes the format's canonical NaN; E2M1 has no
    NaN, so it encodes NaN as +0 (MX and NVFP4 carry a NaN in the block scale).
    """
    fmt = element_format(fmt)
    x = x.float()
    bits = x.view(torch.int32)
    magnitude = x.abs()
    overflow_to_inf = not saturate and fmt.inf_code is not None
    if not overflow_to_inf:
        # Saturation: clamping first makes every overflow (and Inf) encode as the largest
        # finite value, which rounds to itself. NaN passes through the clamp.
        magnitude = magnitude.clamp(max=fmt.max_value)
    mag_bits = magnitude.view(torch.int32)

    # Normal range: round the float32 mantissa to `mbits` bits, ties to even, by adding
    # just under half an ulp plus the lowest kept bit, then re-bias the exponent.
    shift = _F32_MANTISSA_BITS - fmt.mbits
    lowest_kept = (mag_bits >> shift) & 1
    rounded = mag_bits + ((1 << (shift - 1)) - 1 - ((_F32_BIAS - fmt.bias) << _F32_MANTISSA_BITS))
    normal_code = (rounded + lowest_kept) >> shift

    # Subnormal range: adding a power of two whose float32 ulp is the format's subnormal
    # spacing makes the float32 adder round (to nearest even) onto that grid; the bit
    # difference is then the count of spacings, which is the code. Rounding up into the
    # smallest normal gives code 2^mbits, which is exactly that normal's code.
    magic = fmt.min_subnormal * 2.0**_F32_MANTISSA_BITS
    magic_bits = int(torch.tensor(magic, dtype=torch.float32).view(torch.int32))
    subnormal_code = (magnitude + magic).view(torch.int32) - magic_bits

    code = torch.where(magnitude < fmt.min_normal, subnormal_code, normal_code)
    if overflow_to_inf:
        assert fmt.inf_code is not None
        code = code.clamp(max=fmt.inf_code)  # Inf's bit pattern also lands above inf_code
    code = code | ((bits >> 31) & fmt.sign_bit)
    nan_code = fmt.nan_code if fmt.nan_code is not None else 0
    return torch.where(torch.isnan(x), nan_code, code).to(torch.uint8)


def encode_e2m1(x: torch.Tensor) -> torch.Tensor:
    """FP4 E2M1 codes (0..15, one a byte) of `x`; saturates at ±6."""
    return encode(x, E2M1)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    return decode(codes, E2M1)


def encode_e4m3(x: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3 codes of `x`; saturates at ±448 (the format has no infinity)."""
    return encode(x, E4M3)


def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    return decode(codes, E4M3)


def encode_e5m2(x: torch.Tensor, *, saturate: bool = False) -> torch.Tensor:
    """FP8 E5M2 codes of `x`; IEEE overflow to ±Inf unless `saturate` (then ±57344)."""
    return encode(x, E5M2, saturate=saturate)


def decode_e5m2(codes: torch.Tensor) -> torch.Tensor:
    return decode(codes, E5M2)


E8M0_NAN = 0xFF
E8M0_BIAS = 127


def encode_e8m0(x: torch.Tensor, rounding: Literal["floor", "ceil"] = "floor") -> torch.Tensor:
    """The E8M0 code 2^(code-127) of a positive float32: floor or ceil of log2(x).

    Exact for every float32 including subnormals (read from the bit pattern, no
    log2). Results saturate to [2^-127, 2^127]; zero encodes as 2^-127 (E8M0 has no
    zero); NaN, negative values and, with "ceil", nothing else map to the NaN code.
    +Inf saturates to 2^127.
    """
    if rounding not in ("floor", "ceil"):
        raise ValueError(f"rounding must be 'floor' or 'ceil', got {rounding!r}")
    x = x.float()
    bits = x.view(torch.int32)
    exponent = (bits >> _F32_MANTISSA_BITS) & 0xFF
    mantissa = bits & 0x7FFFFF
    if rounding == "floor":
        # A subnormal's floor(log2) is below -126, which clamps to -127 (code 0) anyway.
        code = exponent
    else:
        # Round up to the next power of two. A subnormal m * 2^-149 lies in (2^-127, 2^-126)
        # exactly when m > 2^22, and then rounds up to 2^-126 (code 1); else to 2^-127.
        normal = exponent + (mantissa != 0).to(torch.int32)
        subnormal = (mantissa > (1 << 22)).to(torch.int32)
        code = torch.where(exponent == 0, subnormal, normal)
    code = code.clamp(0, 254)
    code = torch.where(torch.isinf(x) & (x > 0), 254, code)
    code = torch.where(torch.isnan(x) | (x < 0), E8M0_NAN, code)
    return code.to(torch.uint8)


def decode_e8m0(codes: torch.Tensor) -> torch.Tensor:
    """float32 value 2^(code-127) of E8M0 codes (code 0 is the subnormal 2^-127; 0xFF NaN)."""
    c = codes.to(torch.int32)
    bits = torch.where(c == 0, 1 << 22, c << _F32_MANTISSA_BITS)
    value = bits.view(torch.float32)
    return torch.where(c == E8M0_NAN, torch.full_like(value, float("nan")), value)


def pow2_reciprocal_from_e8m0(codes: torch.Tensor) -> torch.Tensor:
    """2^(127-code) as float32, exactly: multiplying by it is a correctly rounded division
    by the scale, because both the scale and its reciprocal are powers of two that float32
    represents exactly for every code in [0, 254]."""
    c = codes.to(torch.int32)
    return decode_e8m0((254 - c).clamp(0, 254).to(torch.uint8)).where(
        c != E8M0_NAN, torch.tensor(float("nan"), device=codes.device)
    )


__all__ = [
    "E2M1",
    "E4M3",
    "E5M2",
    "E8M0_BIAS",
    "E8M0_NAN",
    "ElementFormat",
    "decode",
    "decode_e2m1",
    "decode_e4m3",
    "decode_e5m2",
    "decode_e8m0",
    "decode_table",
    "element_format",
    "encode",
    "encode_e2m1",
    "encode_e4m3",
    "encode_e5m2",
    "encode_e8m0",
]
