"""NVFP4: two-level scales, batch invariance, packing, options, and agreement with torchao."""

from __future__ import annotations

import math

import pytest
import torch

from composer_kernels.formats import (
    E2M1,
    decode,
    nvfp4_fake_quantize,
    nvfp4_quantize,
    pack_fp4,
    random_hadamard_transform,
    unpack_fp4,
)
from composer_kernels.formats.hadamard import random_hadamard_matrix
from composer_kernels.formats.nvfp4 import NVFP4_GLOBAL_DIVISOR


def test_pack_unpack_round_trip_and_nibble_order() -> None:
    codes = torch.arange(16, dtype=torch.uint8).repeat(3, 2)
    packed = pack_fp4(codes)
    assert packed.shape == (3, 16)
    assert packed[0, 0].item() == 0x10  # element 0 low nibble, element 1 high nibble
    assert torch.equal(unpack_fp4(packed), codes)
    all_bytes = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(pack_fp4(unpack_fp4(all_bytes)), all_bytes)
    with pytest.raises(ValueError, match="even"):
        pack_fp4(torch.zeros(3, dtype=torch.uint8))


def test_pack_layout_matches_torchao() -> None:
    kernels = pytest.importorskip("torchao.prototype.mx_formats.kernels")
    codes = torch.randint(0, 16, (8, 64), dtype=torch.uint8)
    assert torch.equal(pack_fp4(codes), kernels.pack_uint4(codes))
    assert torch.equal(unpack_fp4(pack_fp4(codes)), kernels.unpack_uint4(pack_fp4(codes)))


def test_dequantize_is_code_times_block_scale_times_global_scale() -> None:
    x = torch.randn(8, 64) * 3
    q = nvfp4_quantize(x)
    assert q.block_scales.dtype == torch.float8_e4m3fn
    assert q.global_scale.shape == (8, 1)
    codes = unpack_fp4(q.data)
    d = (q.block_scales.float() * q.global_scale).repeat_interleave(16, dim=-1)
    assert torch.equal(q.dequantize(), decode(codes, E2M1) * d)
    # The largest block of each row gets (close to) the largest E4M3 scale, 448.
    assert torch.equal(q.global_scale, x.abs().amax(-1, keepdim=True) / NVFP4_GLOBAL_DIVISOR)
    assert (q.block_scales.float().amax(-1) >= 416).all()


def test_per_token_encoding_is_batch_invariant_and_per_tensor_is_not() -> None:
    gen = torch.Generator().manual_seed(0)
    batch = torch.randn(6, 128, generator=gen)
    other = batch.clone()
    other[1:] *= 50.0  # change every other row; row 0 is the same token in both batches
    a, b = nvfp4_quantize(batch), nvfp4_quantize(other)
    assert torch.equal(a.data[0], b.data[0])
    assert torch.equal(a.block_scales[0].view(torch.uint8), b.block_scales[0].view(torch.uint8))
    assert torch.equal(a.dequantize()[0], b.dequantize()[0])
    ta = nvfp4_quantize(batch, scale_mode="per_tensor")
    tb = nvfp4_quantize(other, scale_mode="per_tensor")
    assert not torch.equal(ta.dequantize()[0], tb.dequantize()[0])


def test_zero_rows_nan_rows_and_tiny_blocks() -> None:
    x = torch.randn(3, 32)
    x[0] = 0.0
    x[1, 5] = math.nan
    x[2, 16:] = 1e-30  # negligible against the row: its E4M3 scale underflows to 0
    out = nvfp4_fake_quantize(x)
    assert torch.equal(out[0], torch.zeros(32))
    assert torch.isnan(out[1]).all()  # a NaN poisons its own row only
    assert torch.equal(out[2, 16:], torch.zeros(16))
    assert torch.isfinite(out[2]).all()


def test_subnormal_e4m3_block_scales_are_kept() -> None:
    x = torch.zeros(1, 32)
    x[0, 0] = 2688.0  # g = 1
    x[0, 16] = 6 * 2.0**-8  # block scale 2^-8: an E4M3 subnormal
    q = nvfp4_quantize(x)
    assert q.block_scales.float()[0].tolist() == [448.0, 2.0**-8]
    assert q.dequantize()[0, 16].item() == 6 * 2.0**-8


def test_two_dimensional_blocks_quantize_the_transpose_identically() -> None:
    w = torch.randn(64, 48)
    w[3, 7] = 40.0
    q = nvfp4_quantize(w, scale_mode="per_tensor", block_2d=True)
    qt = nvfp4_quantize(w.T.contiguous(), scale_mode="per_tensor", block_2d=True)
    assert torch.equal(q.dequantize(), qt.dequantize().T)
    scales = q.block_scales.float()
    assert torch.equal(scales[0:16], scales[0:1].expand(16, -1))  # one scale per 16x16 tile
    with pytest.raises(ValueError, match="per_tensor"):
        nvfp4_quantize(w, block_2d=True)
    with pytest.raises(ValueError, match="multiple of 16"):
        nvfp4_quantize(torch.zeros(24, 32), scale_mode="per_tensor", block_2d=True)


def test_per_tensor_on_a_stack_of_matrices_scales_each_matrix() -> None:
    w = torch.randn(3, 32, 64)
    w[1] *= 100
    q = nvfp4_quantize(w, scale_mode="per_tensor")
    assert q.global_scale.shape == (3, 1, 1)
    for e in range(3):
        single = nvfp4_quantize(w[e], scale_mode="per_tensor")
        assert torch.equal(q.data[e], single.data)


def test_stochastic_rounding_is_seeded_and_unbiased() -> None:
    x = torch.zeros(1, 16)
    x[0, 0] = 2688.0  # g = 1, block scale 448: element values are x / 448
    x[0, 1:] = 448 * 2.5  # halfway between E2M1 2 and 3
    a = nvfp4_quantize(x, stochastic_rounding=True, seed=3)
    b = nvfp4_quantize(x, stochastic_rounding=True, seed=3)
    assert torch.equal(a.data, b.data)
    draws = torch.stack(
        [nvfp4_fake_quantize(x, stochastic_rounding=True, seed=s)[0, 1:] for s in range(400)]
    )
    assert set(draws.unique().tolist()) == {896.0, 1344.0}  # only the two neighbours
    mean = draws.mean().item()
    # 6000 fair coin flips: the mean is 1120 +- 448 * 0.5 / sqrt(6000) (~2.9); allow 5 sigma.
    assert abs(mean - 1120.0) < 15.0
    with pytest.raises(ValueError, match="seed"):
        nvfp4_quantize(x, stochastic_rounding=True)


def test_random_hadamard_is_orthogonal_and_undone_by_dequantize() -> None:
    r = random_hadamard_matrix(seed=7)
    assert torch.allclose(r @ r.T, torch.eye(16), atol=1e-6)
    x = torch.randn(4, 64)
    back = random_hadamard_transform(random_hadamard_transform(x, 7), 7, inverse=True)
    assert torch.allclose(back, x, atol=1e-5)
    # Rotating both GEMM operands along the reduction dimension leaves the product alone.
    w = torch.randn(48, 64)
    xr, wr = random_hadamard_transform(x, 7), random_hadamard_transform(w, 7)
    assert torch.allclose(xr @ wr.T, x @ w.T, atol=1e-4)
    # An outlier is spread over its block; dequantize rotates back to x's basis.
    x[0, 0] = 100.0
    q = nvfp4_quantize(x, hadamard_seed=7)
    in_rotated_basis = q.dequantize(rotated=True)
    assert in_rotated_basis[0, :16].abs().min() > 10.0
    assert torch.allclose(
        random_hadamard_transform(in_rotated_basis, 7, inverse=True), q.dequantize(), atol=1e-5
    )
    assert ((q.dequantize() - x).norm() / x.norm()) < 0.2


def test_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="blocks of 16"):
        nvfp4_quantize(torch.zeros(2, 24))
    with pytest.raises(ValueError, match="scale_mode"):
        nvfp4_quantize(torch.zeros(2, 32), scale_mode="per_row")  # type: ignore[arg-type]


@pytest.mark.parametrize("scale_mode", ["per_token", "per_tensor"])
def test_bits_agree_with_torchao_two_level_nvfp4(scale_mode: str) -> None:
    """torchao's `nvfp4_quantize` with a per-tensor (or per-row) scale amax / 2688 derives
    the E4M3 block scales by the same two correctly rounded divisions: those bytes agree
    exactly. Its elements use x * (1/g / s), a reciprocal-multiply, which differs from our
    x / (s * g) only where the quotient is within a few ulps of an E2M1 rounding boundary;
    everywhere else the FP4 codes agree, and so does the dequantized tensor's definition."""
    ao = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(256, 512, generator=gen) * torch.logspace(-2, 2, 512)
    ours = nvfp4_quantize(x, scale_mode=scale_mode)  # type: ignore[arg-type]
    amax = x.abs().amax() if scale_mode == "per_tensor" else x.abs().amax(-1, keepdim=True)
    scale = ao.per_tensor_amax_to_scale(amax)
    assert torch.equal(scale.reshape(ours.global_scale.shape), ours.global_scale)
    theirs_scales, theirs_data = ao.nvfp4_quantize(x, 16, scale)
    # torchao clamps block scales below E4M3's smallest normal (2^-6) up to it; we keep
    # subnormal scales. Compare the blocks where that clamp does not apply.
    normal = ours.block_scales.float() >= 2.0**-6
    assert normal.float().mean() > 0.95
    assert torch.equal(
        ours.block_scales.view(torch.uint8)[normal], theirs_scales.view(torch.uint8)[normal]
    )
    ours_codes, theirs_codes = unpack_fp4(ours.data), unpack_fp4(theirs_data)
    d = ours.block_decode_scales().repeat_interleave(16, dim=-1)
    y = (x / d).abs()
    boundaries = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    near_boundary = ((y[..., None] - boundaries).abs() / boundaries < 1e-6).any(-1)
    elementwise_normal = normal.repeat_interleave(16, dim=-1)
    differ = (ours_codes != theirs_codes) & elementwise_normal
    assert not (differ & ~near_boundary).any()
