"""NVFP4: E2M1 elements in blocks of 16, an E4M3 block scale, and an FP32 second-level scale.

Per block b of row r (one row = one token for activations)::

    amax_g   = max |x| over the second-level group (the row, or the whole matrix)
    g        = amax_g / (448 * 6)                 # FP32 second-level decode scale
    s_b      = e4m3(amax_b / 6 / g)               # E4M3 block decode scale, saturating
    d_b      = s_b * g                            # the block's decode scale in float32
    q        = e2m1(x / d_b)                      # round to nearest even (or stochastic)
    x_hat    = q * d_b

Every division is a correctly rounded IEEE division. A reciprocal-then-multiply
(`x * (1 / d_b)`), as a fast kernel does it, rounds twice and lands on a different
FP4 code for some inputs (see `tests/test_ieee_division.py`); the Composer report
saw RL diverge after about 100 steps with the fast version.

The second-level scale is per token by default: a token's codes then depend on that
token alone, so they do not change with what else is in the batch (batch
invariance), and no information leaks between tokens of different sequences. A
per-tensor scale (one per matrix; leading dimensions are a batch of matrices, such
as experts) is available for weights.

Limits: a group whose amax is below 2688 * 2^-149 (about 3.8e-42) has g = 0 in
float32 and quantizes to zero; below 2688 * 2^-126 g is a float32 subnormal and the
block scales may saturate.

Options: stochastic rounding (seeded, for gradients), 16x16 two-dimensional blocks
(weights: the transpose quantizes to the same values), and a random Hadamard
transform over blocks of 16 before quantizing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from composer_kernels.formats.elements import E2M1, E4M3, decode, encode
from composer_kernels.formats.hadamard import random_hadamard_transform
from composer_kernels.formats.mx import Backend, _pick_triton
from composer_kernels.formats.packing import pack_fp4, unpack_fp4

NVFP4_BLOCK_SIZE = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
NVFP4_GLOBAL_DIVISOR = E4M3_MAX * E2M1_MAX  # 2688: a block at the group's amax gets s = 448
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude code i has value E2M1_GRID[i]

ScaleMode = Literal["per_token", "per_tensor"]


@dataclass
class NVFP4Tensor:
    """Packed NVFP4 data and its two levels of scale.

    `data`: uint8 [..., K/2], two E2M1 codes a byte. `block_scales`: float8_e4m3fn
    [..., K/16] (with 2D blocks, each 16x16 tile's scale is repeated over its 16 rows,
    so every consumer can read the 1x16 layout). `global_scale`: float32, [..., 1]
    per token or [..., 1, 1] per tensor (broadcasts against `block_scales`).
    """

    data: torch.Tensor
    block_scales: torch.Tensor
    global_scale: torch.Tensor
    scale_mode: ScaleMode
    block_2d: bool = False
    hadamard_seed: int | None = None

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.data.shape[:-1], self.data.shape[-1] * 2))

    def block_decode_scales(self) -> torch.Tensor:
        """d_b = s_b * g in float32, shape [..., K/16]."""
        return self.block_scales.float() * self.global_scale

    def dequantize(
        self, dtype: torch.dtype = torch.float32, *, rotated: bool = False
    ) -> torch.Tensor:
        """q * d_b; undoes the Hadamard rotation unless `rotated` (GEMMs can stay rotated)."""
        return nvfp4_dequantize(self, dtype, rotated=rotated)


def _validate(x: torch.Tensor, scale_mode: str, block_2d: bool) -> None:
    if scale_mode not in ("per_token", "per_tensor"):
        raise ValueError(f"scale_mode must be 'per_token' or 'per_tensor', got {scale_mode!r}")
    if x.dim() == 0 or x.shape[-1] % NVFP4_BLOCK_SIZE != 0:
        raise ValueError(
            f"NVFP4 quantizes the last dimension in blocks of {NVFP4_BLOCK_SIZE}; shape "
            f"{tuple(x.shape)} does not fit (pad the last dimension with zeros)"
        )
    if block_2d:
        if scale_mode != "per_tensor":
            raise ValueError("16x16 blocks share a scale across rows: use scale_mode='per_tensor'")
        if x.dim() < 2 or x.shape[-2] % NVFP4_BLOCK_SIZE != 0:
            raise ValueError(
                f"16x16 blocks need the second-to-last dimension to be a multiple of 16; "
                f"got shape {tuple(x.shape)}"
            )


def nvfp4_global_scale(x: torch.Tensor, scale_mode: ScaleMode = "per_token") -> torch.Tensor:
    """g = amax / 2688 per row ([..., 1]) or per matrix ([..., 1, 1]); 1 where amax is 0."""
    a = x.float().abs()
    amax = a.amax(dim=-1, keepdim=True) if scale_mode == "per_token" else _matrix_amax(a)
    return _global_from_amax(amax)


def _global_from_amax(amax: torch.Tensor) -> torch.Tensor:
    g = amax / NVFP4_GLOBAL_DIVISOR
    return torch.where(amax == 0, torch.ones_like(g), g)


def _matrix_amax(a: torch.Tensor) -> torch.Tensor:
    if a.dim() == 1:
        return a.amax(dim=-1, keepdim=True)
    return a.amax(dim=(-2, -1), keepdim=True)


def _block_amax(x: torch.Tensor, block_2d: bool) -> torch.Tensor:
    a = x.abs()
    blocks = a.reshape(*a.shape[:-1], -1, NVFP4_BLOCK_SIZE).amax(dim=-1)  # [..., R, K/16]
    if not block_2d:
        return blocks
    rows = blocks.shape[-2]
    tiles = blocks.reshape(*blocks.shape[:-2], rows // NVFP4_BLOCK_SIZE, NVFP4_BLOCK_SIZE, -1)
    return tiles.amax(dim=-2).repeat_interleave(NVFP4_BLOCK_SIZE, dim=-2)


def _stochastic_e2m1(y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Round |y| (<= 6) up or down to its E2M1 neighbours with probability by distance."""
    grid = torch.tensor(E2M1_GRID, device=y.device)
    mag = y.abs().clamp(max=E2M1_MAX).nan_to_num(0.0)
    low = (torch.bucketize(mag, grid, right=True) - 1).clamp(0, len(E2M1_GRID) - 1)
    high = (low + 1).clamp(max=len(E2M1_GRID) - 1)
    lo_v, hi_v = grid[low], grid[high]
    gap = hi_v - lo_v
    p_up = torch.where(gap > 0, (mag - lo_v) / torch.where(gap > 0, gap, 1.0), 0.0)
    u = torch.rand(y.shape, generator=generator, device=generator.device).to(y.device)
    code = low + (u < p_up).to(low.dtype)
    sign = torch.where(y < 0, E2M1.sign_bit, 0)
    return (code | sign).to(torch.uint8)


def nvfp4_quantize(
    x: torch.Tensor,
    *,
    scale_mode: ScaleMode = "per_token",
    block_2d: bool = False,
    stochastic_rounding: bool = False,
    seed: int | None = None,
    hadamard_seed: int | None = None,
    backend: Backend = "auto",
) -> NVFP4Tensor:
    """Quantize `x` to NVFP4 along its last dimension (see the module docstring).

    `stochastic_rounding` draws from a generator seeded with `seed` (required), so a
    gradient quantization can be replayed. `hadamard_seed` applies the random
    Hadamard transform of that seed before quantizing. `backend="auto"` runs the Triton
    kernel (per-token or per-tensor, without the other options) for CUDA tensors when
    Triton is installed.
    """
    _validate(x, scale_mode, block_2d)
    if stochastic_rounding and seed is None:
        raise ValueError("stochastic_rounding needs a seed, so the rounding can be reproduced")
    plain = not block_2d and not stochastic_rounding and hadamard_seed is None
    if _pick_triton(x, backend, plain):
        from composer_kernels.triton_kernels import _nvfp4 as kernels

        run = (
            kernels.nvfp4_quantize_per_token
            if scale_mode == "per_token"
            else kernels.nvfp4_quantize_per_tensor
        )
        data, scale_codes, g = run(x)
        return NVFP4Tensor(
            data=data,
            block_scales=scale_codes.view(torch.float8_e4m3fn),
            global_scale=g,
            scale_mode=scale_mode,
        )
    xf = x.float()
    if hadamard_seed is not None:
        xf = random_hadamard_transform(xf, hadamard_seed)
    block_amax = _block_amax(xf, block_2d)  # [..., R, K/16]
    # The group amax is the largest block amax (one pass over x fewer).
    group_amax = block_amax.amax(dim=-1, keepdim=True)
    if scale_mode == "per_tensor":
        group_amax = _matrix_amax(group_amax)
    g = _global_from_amax(group_amax)
    s_codes = encode(block_amax / E2M1_MAX / g, E4M3, saturate=True)
    s = s_codes.view(torch.float8_e4m3fn)
    d = s.float() * g  # [..., K/16]
    blocks = xf.reshape(*xf.shape[:-1], -1, NVFP4_BLOCK_SIZE)
    # A block whose scale underflows to 0 holds only values negligible against the group
    # amax: dividing by +Inf instead sends them to 0 (and NaN, which also encodes as 0).
    d_b = torch.where(d == 0, float("inf"), d).unsqueeze(-1)
    y = blocks / d_b
    if stochastic_rounding:
        assert seed is not None
        gen = torch.Generator(device="cpu").manual_seed(seed)
        codes = _stochastic_e2m1(y, gen)
    else:
        codes = encode(y, E2M1)
    return NVFP4Tensor(
        data=pack_fp4(codes.reshape(xf.shape)),
        block_scales=s,
        global_scale=g,
        scale_mode=scale_mode,
        block_2d=block_2d,
        hadamard_seed=hadamard_seed,
    )


def nvfp4_dequantize(
    t: NVFP4Tensor, dtype: torch.dtype = torch.float32, *, rotated: bool = False
) -> torch.Tensor:
    values = decode(unpack_fp4(t.data), E2M1)
    blocks = values.reshape(*values.shape[:-1], -1, NVFP4_BLOCK_SIZE)
    out = (blocks * t.block_decode_scales().unsqueeze(-1)).reshape(values.shape)
    if t.hadamard_seed is not None and not rotated:
        out = random_hadamard_transform(out, t.hadamard_seed, inverse=True)
    return out.to(dtype)


def nvfp4_fake_quantize(
    x: torch.Tensor,
    *,
    scale_mode: ScaleMode = "per_token",
    block_2d: bool = False,
    stochastic_rounding: bool = False,
    seed: int | None = None,
    hadamard_seed: int | None = None,
) -> torch.Tensor:
    """dequantize(quantize(x)) in float32, in x's (unrotated) basis."""
    q = nvfp4_quantize(
        x,
        scale_mode=scale_mode,
        block_2d=block_2d,
        stochastic_rounding=stochastic_rounding,
        seed=seed,
        hadamard_seed=hadamard_seed,
    )
    return q.dequantize(torch.float32)


__all__ = [
    "E2M1_GRID",
    "NVFP4_BLOCK_SIZE",
    "NVFP4_GLOBAL_DIVISOR",
    "NVFP4Tensor",
    "ScaleMode",
    "nvfp4_dequantize",
    "nvfp4_fake_quantize",
    "nvfp4_global_scale",
    "nvfp4_quantize",
]
