"""Triton NVFP4 quantizer: one program a row, two passes over the row.

Per token, pass 1 finds the row's amax (the second-level scale g = amax / 2688); per
tensor, g comes in precomputed (one reduction over the matrix in PyTorch, the same
code the reference runs) and pass 1 is skipped. Pass 2 writes E4M3 block scales and
packed E2M1 pairs, reading even and odd elements separately so that each pair lands in
one byte without a shuffle.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from composer_kernels.formats.elements import E2M1, E4M3
from composer_kernels.formats.nvfp4 import NVFP4_GLOBAL_DIVISOR
from composer_kernels.triton_kernels._jit import decode_e4m3, encode_minifloat
from composer_kernels.triton_kernels._params import minifloat_params

_E4M3 = {f"S_{k}": v for k, v in minifloat_params(E4M3).items()}
_E2M1 = {f"Q_{k}": v for k, v in minifloat_params(E2M1).items()}


@triton.jit
def _nvfp4_per_token_kernel(
    x_ptr,
    data_ptr,
    scale_ptr,
    global_ptr,
    K,
    GIVEN_G: tl.constexpr,
    GLOBAL_DIVISOR: tl.constexpr,
    BLOCKS_PER_STEP: tl.constexpr,
    S_MBITS: tl.constexpr,
    S_BIAS: tl.constexpr,
    S_MAX_CODE: tl.constexpr,
    S_NAN_CODE: tl.constexpr,
    S_SIGN_BIT: tl.constexpr,
    S_MIN_NORMAL: tl.constexpr,
    S_MAGIC: tl.constexpr,
    S_MAGIC_BITS: tl.constexpr,
    Q_MBITS: tl.constexpr,
    Q_BIAS: tl.constexpr,
    Q_MAX_CODE: tl.constexpr,
    Q_NAN_CODE: tl.constexpr,
    Q_SIGN_BIT: tl.constexpr,
    Q_MIN_NORMAL: tl.constexpr,
    Q_MAGIC: tl.constexpr,
    Q_MAGIC_BITS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * K
    STEP: tl.constexpr = BLOCKS_PER_STEP * 16
    lanes = tl.arange(0, STEP)

    if GIVEN_G:
        g = tl.load(global_ptr + row)
    else:
        # Pass 1: the row's amax, with NaN tracked explicitly (GPU max drops NaN).
        amax = tl.zeros((STEP,), dtype=tl.float32)
        nan_seen = tl.zeros((STEP,), dtype=tl.int32)
        for start in range(0, K, STEP):
            idx = start + lanes
            x = tl.load(x_row + idx, mask=idx < K, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(x))
            nan_seen = tl.maximum(nan_seen, (x != x).to(tl.int32))
        row_amax = tl.max(amax, axis=0)
        g = tl.math.div_rn(row_amax, GLOBAL_DIVISOR)
        g = tl.where(row_amax == 0.0, 1.0, g)
        g = tl.where(tl.max(nan_seen, axis=0) > 0, float("nan"), g)
        tl.store(global_ptr + row, g)

    # Pass 2: blocks of 16 as [blocks, 8] even and [blocks, 8] odd elements.
    block_ids = tl.arange(0, BLOCKS_PER_STEP)
    pair = tl.arange(0, 8)
    for start in range(0, K, STEP):
        block = start // 16 + block_ids
        block_ok = block * 16 < K
        even_idx = block[:, None] * 16 + pair[None, :] * 2
        x_even = tl.load(x_row + even_idx, mask=block_ok[:, None], other=0.0).to(tl.float32)
        x_odd = tl.load(x_row + even_idx + 1, mask=block_ok[:, None], other=0.0).to(tl.float32)
        block_amax = tl.maximum(tl.max(tl.abs(x_even), axis=1), tl.max(tl.abs(x_odd), axis=1))
        s_target = tl.math.div_rn(tl.math.div_rn(block_amax, 6.0), g)
        s_code = encode_minifloat(
            s_target,
            S_MBITS,
            S_BIAS,
            S_MAX_CODE,
            S_NAN_CODE,
            S_SIGN_BIT,
            S_MIN_NORMAL,
            S_MAGIC,
            S_MAGIC_BITS,
        )
        d = decode_e4m3(s_code) * g
        # As the reference: a block whose scale underflowed divides by +Inf (-> ±0).
        d_safe = tl.where(d == 0.0, float("inf"), d)[:, None]
        y_even = tl.math.div_rn(x_even, d_safe)
        y_odd = tl.math.div_rn(x_odd, d_safe)
        c_even = encode_minifloat(
            y_even,
            Q_MBITS,
            Q_BIAS,
            Q_MAX_CODE,
            Q_NAN_CODE,
            Q_SIGN_BIT,
            Q_MIN_NORMAL,
            Q_MAGIC,
            Q_MAGIC_BITS,
        )
        c_odd = encode_minifloat(
            y_odd,
            Q_MBITS,
            Q_BIAS,
            Q_MAX_CODE,
            Q_NAN_CODE,
            Q_SIGN_BIT,
            Q_MIN_NORMAL,
            Q_MAGIC,
            Q_MAGIC_BITS,
        )
        packed = (c_even | (c_odd << 4)).to(tl.uint8)
        byte_idx = block[:, None] * 8 + pair[None, :]
        tl.store(data_ptr + row * (K // 2) + byte_idx, packed, mask=block_ok[:, None])
        tl.store(scale_ptr + row * (K // 16) + block, s_code.to(tl.uint8), mask=block_ok)


def nvfp4_quantize_per_token(
    x: torch.Tensor, blocks_per_step: int = 16
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed E2M1 uint8 [..., K/2], E4M3 block-scale codes uint8 [..., K/16], g [..., 1])."""
    return _launch(x, None, blocks_per_step)


def nvfp4_quantize_per_tensor(
    x: torch.Tensor, blocks_per_step: int = 16
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As `nvfp4_quantize_per_token` with one g per matrix (leading dims: a batch of
    matrices); g has shape [..., 1, 1]."""
    from composer_kernels.formats.nvfp4 import nvfp4_global_scale

    g = nvfp4_global_scale(x, "per_tensor")
    data, scales, _ = _launch(x, g, blocks_per_step)
    return data, scales, g


def _launch(
    x: torch.Tensor, given_g: torch.Tensor | None, blocks_per_step: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if x.shape[-1] % 16 != 0:
        raise ValueError(f"the last dimension ({x.shape[-1]}) must be a multiple of 16")
    x = x.contiguous()
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    data = torch.empty((*x.shape[:-1], k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((*x.shape[:-1], k // 16), dtype=torch.uint8, device=x.device)
    if given_g is None:
        g = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    else:
        g = given_g.expand(*x.shape[:-1], 1).contiguous()  # one g a row
    if rows == 0:
        return data, scales, g
    _nvfp4_per_token_kernel[(rows,)](
        x,
        data,
        scales,
        g,
        k,
        GIVEN_G=given_g is not None,
        GLOBAL_DIVISOR=NVFP4_GLOBAL_DIVISOR,
        BLOCKS_PER_STEP=blocks_per_step,
        **_E4M3,
        **_E2M1,
        enable_fp_fusion=False,
    )
    return data, scales, g
