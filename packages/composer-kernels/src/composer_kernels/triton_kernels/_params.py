"""Compile-time constants that describe an element format to the Triton encoder."""

from __future__ import annotations

import struct

from composer_kernels.formats.elements import ElementFormat


def minifloat_params(fmt: ElementFormat) -> dict[str, int | float]:
    magic = fmt.min_subnormal * 2.0**23
    return {
        "MBITS": fmt.mbits,
        "BIAS": fmt.bias,
        "MAX_CODE": fmt.max_code,
        "NAN_CODE": fmt.nan_code if fmt.nan_code is not None else 0,
        "SIGN_BIT": fmt.sign_bit,
        "MIN_NORMAL": fmt.min_normal,
        "MAGIC": magic,
        "MAGIC_BITS": struct.unpack("<i", struct.pack("<f", magic))[0],
    }
