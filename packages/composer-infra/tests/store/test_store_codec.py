import math

import pytest
import torch

from composer_infra.store import codec
from composer_infra.store.errors import CorruptObject


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bfloat16,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int64,
        torch.uint8,
        torch.bool,
    ],
)
def test_xor_roundtrip_is_bit_exact(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        old = torch.randn(17, 5, generator=g).to(dtype)
        new = old.clone()
        new[3] = float("nan")
        new[4, 0] = -0.0
        new[5, 1] = math.inf
    elif dtype == torch.bool:
        old = torch.rand(17, 5, generator=g) > 0.5
        new = ~old
    else:
        old = torch.randint(0, 100, (17, 5), generator=g).to(dtype)
        new = old + 1
    old_bits, new_bits = codec.to_bits(old), codec.to_bits(new)
    frame = codec.compress(codec.xor_bits(new_bits, old_bits), level=3)
    nbytes = new.numel() * new.element_size()
    delta = codec.decompress(frame, nbytes=nbytes, bits_dtype=old_bits.dtype, what="t")
    rebuilt = codec.from_bits(torch.bitwise_xor(delta, old_bits), dtype, tuple(new.shape))
    assert torch.equal(rebuilt.view(torch.uint8), new.view(torch.uint8))
    assert codec.checksum(codec.to_bits(rebuilt)) == codec.checksum(new_bits)


def test_unchanged_tensor_compresses_to_almost_nothing() -> None:
    t = torch.randn(256, 256).to(torch.bfloat16)
    bits = codec.to_bits(t)
    assert len(codec.compress(codec.xor_bits(bits, bits), level=3)) < 200
    assert len(codec.compress(bits, level=3)) > 50_000


def test_corrupt_frame_is_reported() -> None:
    bits = codec.to_bits(torch.arange(1000, dtype=torch.int32))
    frame = bytearray(codec.compress(bits, level=3))
    with pytest.raises(CorruptObject, match=r"does not decode|decoded"):
        codec.decompress(
            bytes(frame[: len(frame) // 2]), nbytes=4000, bits_dtype=torch.int32, what="t"
        )


def test_checksum_sees_a_single_bit() -> None:
    a = torch.zeros(1024, dtype=torch.bfloat16)
    b = a.clone()
    b.view(torch.int16)[500] ^= 1
    assert codec.checksum(codec.to_bits(a)) != codec.checksum(codec.to_bits(b))
