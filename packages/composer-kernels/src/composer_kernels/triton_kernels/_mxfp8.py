"""Triton MXFP8 quantizer: blocks of 32 along the last dimension of a contiguous tensor."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from composer_kernels.formats.elements import E4M3, E5M2, ElementFormat
from composer_kernels.triton_kernels._jit import encode_minifloat
from composer_kernels.triton_kernels._params import minifloat_params

BLOCK = 32


@triton.jit
def _mxfp8_kernel(
    x_ptr,
    data_ptr,
    scale_ptr,
    n_blocks,
    BLOCKS_PER_PROGRAM: tl.constexpr,
    RCEIL: tl.constexpr,
    EMAX: tl.constexpr,
    MAX_VALUE: tl.constexpr,
    MBITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
    SIGN_BIT: tl.constexpr,
    MIN_NORMAL: tl.constexpr,
    MAGIC: tl.constexpr,
    MAGIC_BITS: tl.constexpr,
):
    pid = tl.program_id(0)
    blocks = pid * BLOCKS_PER_PROGRAM + tl.arange(0, BLOCKS_PER_PROGRAM)
    block_ok = blocks < n_blocks
    offsets = blocks[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + offsets, mask=block_ok[:, None], other=0.0).to(tl.float32)
    mag = tl.abs(x)
    amax = tl.max(mag, axis=1)
    # GPU max ignores NaN; track non-finite blocks explicitly.
    non_finite = tl.max(((x != x) | (mag == float("inf"))).to(tl.int32), axis=1) > 0

    if RCEIL:
        descale = tl.math.div_rn(amax, MAX_VALUE)
        d_bits = descale.to(tl.int32, bitcast=True)
        d_exp = (d_bits >> 23) & 0xFF
        d_man = d_bits & 0x7FFFFF
        code = tl.where(
            d_exp == 0, (d_man > 0x400000).to(tl.int32), d_exp + (d_man != 0).to(tl.int32)
        )
    else:
        code = ((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - EMAX
    code = tl.minimum(tl.maximum(code, 0), 254)

    # 2^(127 - code), exactly (2^-127 is the float32 subnormal 0x00400000).
    r = 254 - code
    recip = tl.where(r == 0, 0x400000, r << 23).to(tl.float32, bitcast=True)
    recip = tl.where(non_finite, float("nan"), recip)
    y = x * recip[:, None]
    elements = encode_minifloat(
        y, MBITS, BIAS, MAX_CODE, NAN_CODE, SIGN_BIT, MIN_NORMAL, MAGIC, MAGIC_BITS
    )
    tl.store(data_ptr + offsets, elements.to(tl.uint8), mask=block_ok[:, None])
    scale = tl.where(non_finite, 255, code)
    tl.store(scale_ptr + blocks, scale.to(tl.uint8), mask=block_ok)


def mxfp8_quantize_lastdim(
    x: torch.Tensor, elem: ElementFormat, rceil: bool, blocks_per_program: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """(element codes uint8 like x, E8M0 codes uint8 [..., K/32]) for contiguous x."""
    if elem not in (E4M3, E5M2):
        raise ValueError(f"MXFP8 elements are e4m3 or e5m2, got {elem.name}")
    if x.shape[-1] % BLOCK != 0:
        raise ValueError(f"the last dimension ({x.shape[-1]}) must be a multiple of {BLOCK}")
    x = x.contiguous()
    data = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    scales = torch.empty((*x.shape[:-1], x.shape[-1] // BLOCK), dtype=torch.uint8, device=x.device)
    n_blocks = x.numel() // BLOCK
    grid = (triton.cdiv(n_blocks, blocks_per_program),)
    _mxfp8_kernel[grid](
        x,
        data,
        scales,
        n_blocks,
        BLOCKS_PER_PROGRAM=blocks_per_program,
        RCEIL=rceil,
        EMAX=elem.emax,
        MAX_VALUE=elem.max_value,
        **minifloat_params(elem),
        enable_fp_fusion=False,
    )
    return data, scales
