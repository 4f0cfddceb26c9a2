"""Triton device functions shared by the quantizer kernels.

They restate `formats.elements` in Triton, operation for operation: integer rounding
on the float32 bit pattern for normals, the float32-adder trick for subnormals, and
correctly rounded division (`tl.math.div_rn`; Triton's `/` on float32 is a 2-ulp
approximation on NVIDIA GPUs). Kernels are launched with `enable_fp_fusion=False` so
that no multiply and add are contracted into an FMA, which would round once where the
PyTorch reference rounds twice.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def encode_minifloat(
    y,
    MBITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
    SIGN_BIT: tl.constexpr,
    MIN_NORMAL: tl.constexpr,
    MAGIC: tl.constexpr,
    MAGIC_BITS: tl.constexpr,
):
    """Saturating round-to-nearest-even encode of float32 `y`; int32 codes."""
    SHIFT: tl.constexpr = 23 - MBITS
    bits = y.to(tl.int32, bitcast=True)
    negative = bits < 0
    mag = tl.abs(y)
    mag_bits = mag.to(tl.int32, bitcast=True)
    lowest_kept = (mag_bits >> SHIFT) & 1
    rounded = mag_bits + ((1 << (SHIFT - 1)) - 1) + lowest_kept
    normal = (rounded - ((127 - BIAS) << 23)) >> SHIFT
    subnormal = (mag + MAGIC).to(tl.int32, bitcast=True) - MAGIC_BITS
    code = tl.where(mag < MIN_NORMAL, subnormal, normal)
    code = tl.where(code > MAX_CODE, MAX_CODE, code)
    code = tl.where(mag == float("inf"), MAX_CODE, code)
    is_nan = y != y
    code = tl.where(is_nan, NAN_CODE, code)
    return code | tl.where(negative & (y == y), SIGN_BIT, 0)


@triton.jit
def decode_e4m3(code):
    """float32 value of int32 E4M3 codes (NaN for S.1111.111)."""
    exponent = (code >> 3) & 0xF
    mantissa = code & 0x7
    sign = tl.where((code & 0x80) != 0, -1.0, 1.0)
    # (8 + m) * 2^(e - 10) for normals, m * 2^-9 for subnormals: products of small
    # integers and powers of two, exact in float32.
    pow2 = ((exponent - 10 + 127) << 23).to(tl.float32, bitcast=True)
    normal = (8 + mantissa).to(tl.float32) * pow2
    subnormal = mantissa.to(tl.float32) * 0.001953125
    value = sign * tl.where(exponent == 0, subnormal, normal)
    return tl.where((code & 0x7F) == 0x7F, float("nan"), value)
