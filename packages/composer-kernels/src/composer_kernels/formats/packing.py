"""Two FP4 codes a byte: element 2i in the low nibble, element 2i+1 in the high one.

This is the order of PTX's `e2m1x2`, cuBLAS and torchao's `pack_uint4`, so packed
tensors can be handed to those without reshuffling.
"""

from __future__ import annotations

import torch


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] uint8 codes in 0..15 -> [..., K/2] bytes."""
    if codes.shape[-1] % 2 != 0:
        raise ValueError(f"the last dimension ({codes.shape[-1]}) must be even to pack FP4 pairs")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] uint8 codes in 0..15."""
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack([low, high], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


__all__ = ["pack_fp4", "unpack_fp4"]
