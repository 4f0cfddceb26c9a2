"""Why the scale arithmetic must be a correctly rounded division.

A fast kernel replaces x / d by x * (1 / d): the reciprocal is rounded, then the
product is rounded again. When x / d is exactly an E2M1 tie (say 1.25, halfway between
1 and 1.5), the true quotient rounds to even (1.0) while the reciprocal path lands a
hair above the tie and rounds to 1.5. Over many RL steps such one-sided differences added up
to a divergence in the Composer report.
"""

from __future__ import annotations

import pytest
import torch

from composer_kernels.formats import E2M1, encode, nvfp4_quantize, unpack_fp4


def _row_with_block(block_values: list[float]) -> torch.Tensor:
    """A row whose first block pins the global scale to 1 (amax 2688) followed by one block."""
    x = torch.zeros(1, 32)
    x[0, 0] = 2688.0
    x[0, 16 : 16 + len(block_values)] = torch.tensor(block_values)
    return x


def test_reciprocal_multiply_gives_different_fp4_bits() -> None:
    # Block amax 11.25 -> E4M3 block scale 1.875 (exact), g = 1, so d = 1.875, and
    # 2.34375 / 1.875 = 1.25 exactly.
    x = _row_with_block([11.25, 2.34375])
    q = nvfp4_quantize(x)
    d = (q.block_scales.float() * q.global_scale)[0, 1]
    assert d.item() == 1.875
    element = x[0, 17]
    exact = element / d
    fast = element * (1.0 / d)
    assert exact.item() == 1.25
    assert fast.item() > 1.25  # 1 / 1.875 rounds up in float32
    assert encode(exact, E2M1).item() == 2  # 1.0: ties to even
    assert encode(fast, E2M1).item() == 3  # 1.5
    # The quantizer follows the exact division.
    assert unpack_fp4(q.data)[0, 17].item() == 2


def test_torchao_reciprocal_multiply_lands_on_the_other_code() -> None:
    """torchao's NVFP4 quantizer scales by x * (1/g / s): on the same input it writes 1.5
    where the correctly rounded quotient writes 1.0."""
    ao = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    x = _row_with_block([11.25, 2.34375])
    ours = nvfp4_quantize(x, scale_mode="per_tensor")
    scales, data = ao.nvfp4_quantize(x, 16, ao.per_tensor_amax_to_scale(x.abs().amax()))
    assert torch.equal(scales.view(torch.uint8), ours.block_scales.view(torch.uint8))
    assert unpack_fp4(ours.data)[0, 17].item() == 2
    assert unpack_fp4(data)[0, 17].item() == 3


def test_exact_division_is_the_correctly_rounded_quotient() -> None:
    """Check float32 division against exact rational arithmetic in float64 over random
    pairs: x / d in float32 equals round_f32(x / d computed exactly)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(100_000, generator=gen) * 100
    d = torch.rand(100_000, generator=gen) * 10 + 0.01
    exact = (x.double() / d.double()).float()  # float64 quotient of float32s rounds once
    assert torch.equal(x / d, exact)
    assert not torch.equal(x * (1.0 / d), exact)
