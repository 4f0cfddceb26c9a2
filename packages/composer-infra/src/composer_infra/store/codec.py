"""Bit-level tensor encoding: XOR against a base, zstd, and checksums of raw bits.

Why XOR of raw bits: a weight that did not change between two versions XORs to zero,
whatever its dtype, and long runs of zero bytes compress to almost nothing. Unlike a
subtraction in floating point, XOR is exactly invertible, so the reader rebuilds the
new tensor bit for bit. Checksums are taken over the raw bits for the same reason.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
import zstandard

from composer_infra.store.errors import CorruptObject

_BITS_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_NUMPY_BITS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CorruptObject(f"manifest names unknown dtype {name!r}")
    return dtype


def to_bits(tensor: torch.Tensor) -> torch.Tensor:
    """A flat, contiguous CPU integer view of `tensor`'s raw bits (no copy for CPU tensors)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    bits_dtype = _BITS_DTYPE.get(flat.element_size())
    if bits_dtype is None:
        raise TypeError(f"cannot publish dtype {tensor.dtype}: element size {flat.element_size()}")
    if flat.dtype == torch.bool:
        return flat.view(torch.uint8)
    return flat.view(bits_dtype)


def from_bits(bits: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    return bits.view(dtype).reshape(shape)


def checksum(bits: torch.Tensor) -> str:
    """BLAKE2b-128 of the raw bits, hex; cheap enough to check every tensor on every version."""
    return hashlib.blake2b(bits.numpy().view(np.uint8).data, digest_size=16).hexdigest()


def xor_bits(bits: torch.Tensor, base: torch.Tensor | None) -> torch.Tensor:
    """`bits` XOR `base` (a snapshot is the XOR against nothing)."""
    if base is None:
        return bits
    if base.shape != bits.shape or base.dtype != bits.dtype:
        raise ValueError(
            f"base has {base.dtype}{list(base.shape)}, new has {bits.dtype}{list(bits.shape)}"
        )
    return torch.bitwise_xor(bits, base)


def _shuffle(bits: torch.Tensor) -> np.ndarray:
    """Group byte k of every element together (as blosc's shuffle filter does).

    For an XOR delta the high bytes (sign and exponent) are almost always zero while the
    low mantissa bytes are noisy; separating the two lets zstd see the long zero runs.
    """
    size = bits.element_size()
    raw = bits.numpy().view(np.uint8)
    return raw if size == 1 else np.ascontiguousarray(raw.reshape(-1, size).T)


def _unshuffle(raw: np.ndarray, size: int) -> np.ndarray:
    return raw if size == 1 else np.ascontiguousarray(raw.reshape(size, -1).T).reshape(-1)


def compress(bits: torch.Tensor, level: int) -> bytes:
    """One zstd frame of the byte-shuffled bits."""
    # One compressor per call: ZstdCompressor objects are not safe to share across threads.
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(
        _shuffle(bits).data
    )


def decompress(frame: bytes, *, nbytes: int, bits_dtype: torch.dtype, what: str) -> torch.Tensor:
    """Inflate one zstd frame into a flat integer tensor, or raise `CorruptObject`."""
    try:
        raw = zstandard.ZstdDecompressor().decompress(frame, max_output_size=nbytes)
    except zstandard.ZstdError as error:
        raise CorruptObject(f"{what}: zstd frame does not decode ({error})") from None
    if len(raw) != nbytes:
        raise CorruptObject(f"{what}: decoded {len(raw)} bytes, manifest says {nbytes}")
    size = torch.empty((), dtype=bits_dtype).element_size()
    flat = _unshuffle(np.frombuffer(raw, dtype=np.uint8), size)
    if not flat.flags.writeable:
        flat = flat.copy()  # torch wants to own writable memory
    return torch.from_numpy(flat.view(_NUMPY_BITS[size]))


def bits_dtype_for(dtype: torch.dtype) -> torch.dtype:
    size = torch.empty((), dtype=dtype).element_size()
    return _BITS_DTYPE[size]
