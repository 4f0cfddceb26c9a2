"""MXFP8 (OCP Microscaling v1.0): blocks of 32 elements sharing one E8M0 scale.

A block's scale is a power of two, so scaling is exact and only the element
encoding rounds. Two rules pick the scale from the block's largest magnitude:

- "floor" (the OCP spec, section 6.3): 2^(floor(log2(amax)) - emax), where emax is
  the element format's largest exponent (8 for E4M3, 15 for E5M2). Values above the
  element's largest finite value saturate.
- "rceil" (NVIDIA's cuBLAS / TransformerEngine rule): the smallest power of two
  >= amax / max_value, with the division correctly rounded, so nothing saturates.

A block that holds a NaN or an Inf gets the NaN scale (0xFF) and decodes to NaN: its
information is gone, and saturating silently would hide a divergence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from composer_kernels.formats.elements import (
    E4M3,
    E5M2,
    E8M0_NAN,
    ElementFormat,
    decode_e8m0,
    element_format,
    pow2_reciprocal_from_e8m0,
)

ScaleRule = Literal["floor", "rceil"]
Backend = Literal["auto", "torch", "triton"]
MX_BLOCK_SIZE = 32
_FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@dataclass
class MXTensor:
    """An MX-quantized tensor: element codes plus one E8M0 scale a block.

    `data` has the input's shape and a float8 dtype (its bits are the element
    codes). `scales` (uint8 E8M0 codes) has the input's shape with `dim` divided by
    `block_size`.
    """

    data: torch.Tensor
    scales: torch.Tensor
    elem: ElementFormat
    block_size: int
    dim: int
    scale_rule: ScaleRule

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return mx_dequantize(self, dtype)


def mx_scale_codes(amax: torch.Tensor, elem: ElementFormat, rule: ScaleRule) -> torch.Tensor:
    """E8M0 scale codes for blocks whose largest magnitude is `amax` (float32)."""
    amax = amax.float()
    bits = amax.view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    if rule == "floor":
        # floor(log2(amax)) - emax, biased; a subnormal or zero amax clamps to 2^-127.
        code = (exponent - elem.emax).clamp(0, 254)
    elif rule == "rceil":
        descale = amax / elem.max_value  # correctly rounded IEEE division
        d_bits = descale.view(torch.int32)
        d_exp = (d_bits >> 23) & 0xFF
        d_man = d_bits & 0x7FFFFF
        normal = d_exp + (d_man != 0).to(torch.int32)
        subnormal = (d_man > (1 << 22)).to(torch.int32)
        code = torch.where(d_exp == 0, subnormal, normal).clamp(0, 254)
    else:
        raise ValueError(f"scale_rule must be 'floor' or 'rceil', got {rule!r}")
    return torch.where(torch.isfinite(amax), code, E8M0_NAN).to(torch.uint8)


def mx_quantize(
    x: torch.Tensor,
    elem: str | ElementFormat = "e4m3",
    *,
    block_size: int = MX_BLOCK_SIZE,
    dim: int = -1,
    scale_rule: ScaleRule = "floor",
    backend: Backend = "auto",
) -> MXTensor:
    """Quantize `x` to MX with blocks of `block_size` along `dim` (E4M3 or E5M2 elements).

    `backend="auto"` runs the Triton kernel for CUDA tensors when Triton is installed
    (bit-identical to the PyTorch reference) and PyTorch otherwise.
    """
    fmt = element_format(elem)
    if fmt not in (E4M3, E5M2):
        raise ValueError(f"MXFP8 elements are e4m3 or e5m2, got {fmt.name}")
    if x.dim() == 0:
        raise ValueError("mx_quantize needs at least one dimension")
    dim = dim % x.dim()
    if x.shape[dim] % block_size != 0:
        raise ValueError(
            f"dimension {dim} of shape {tuple(x.shape)} is not a multiple of the block size "
            f"{block_size}; pad it (zeros do not change a block's scale)"
        )
    if scale_rule not in ("floor", "rceil"):
        raise ValueError(f"scale_rule must be 'floor' or 'rceil', got {scale_rule!r}")
    if _pick_triton(x, backend, block_size == MX_BLOCK_SIZE):
        from composer_kernels.triton_kernels._mxfp8 import mxfp8_quantize_lastdim

        codes, scale_codes = mxfp8_quantize_lastdim(
            x.movedim(dim, -1), fmt, rceil=scale_rule == "rceil"
        )
        return MXTensor(
            data=codes.view(_FP8_DTYPES[fmt.name]).movedim(-1, dim),
            scales=scale_codes.movedim(-1, dim),
            elem=fmt,
            block_size=block_size,
            dim=dim,
            scale_rule=scale_rule,
        )
    moved = x.float().movedim(dim, -1)
    blocks = moved.reshape(*moved.shape[:-1], moved.shape[-1] // block_size, block_size)
    amax = blocks.abs().amax(dim=-1)  # propagates NaN, so a NaN block stays non-finite
    scale_codes = mx_scale_codes(amax, fmt, scale_rule)
    scaled = blocks * pow2_reciprocal_from_e8m0(scale_codes).unsqueeze(-1)
    data = cast_fp8_saturating(scaled, fmt).reshape(moved.shape).movedim(-1, dim)
    return MXTensor(
        data=data,
        scales=scale_codes.movedim(-1, dim),
        elem=fmt,
        block_size=block_size,
        dim=dim,
        scale_rule=scale_rule,
    )


def _pick_triton(x: torch.Tensor, backend: Backend, supported: bool) -> bool:
    if backend == "torch":
        return False
    from composer_kernels.triton_kernels import check_triton_runs_on, use_triton

    if backend == "triton":
        if not supported:
            raise ValueError("the Triton kernel does not support these options")
        check_triton_runs_on(x)
        return True
    return supported and x.dtype in (torch.float32, torch.bfloat16, torch.float16) and use_triton(x)


def cast_fp8_saturating(y: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """`encode(y, fmt, saturate=True)` as a float8 tensor, through torch's cast.

    torch's float8 cast rounds to nearest even and keeps subnormals; clamping first
    makes overflow saturate on every torch version (older ones overflowed to NaN/Inf).
    tests/test_elements.py checks that this equals the bit-level `encode` on every
    float32 class (normals, subnormals, ties, overflow, ±Inf, NaN); it is several times
    faster on the CPU.
    """
    return y.clamp(-fmt.max_value, fmt.max_value).to(_FP8_DTYPES[fmt.name])


def mx_dequantize(t: MXTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Element value times its block's scale (exact in float32 unless it underflows)."""
    values = t.data.float().movedim(t.dim, -1)
    blocks = values.reshape(*values.shape[:-1], -1, t.block_size)
    scale = decode_e8m0(t.scales.movedim(t.dim, -1)).unsqueeze(-1)
    out = (blocks * scale).reshape(values.shape).movedim(-1, t.dim)
    return out.to(dtype)


def mx_fake_quantize(
    x: torch.Tensor,
    elem: str | ElementFormat = "e4m3",
    *,
    block_size: int = MX_BLOCK_SIZE,
    dim: int = -1,
    scale_rule: ScaleRule = "floor",
) -> torch.Tensor:
    """dequantize(quantize(x)) in float32: what a GEMM on MX operands sees."""
    q = mx_quantize(x, elem, block_size=block_size, dim=dim, scale_rule=scale_rule)
    return q.dequantize(torch.float32)


__all__ = [
    "MX_BLOCK_SIZE",
    "Backend",
    "MXTensor",
    "ScaleRule",
    "mx_dequantize",
    "mx_fake_quantize",
    "mx_quantize",
    "mx_scale_codes",
]
