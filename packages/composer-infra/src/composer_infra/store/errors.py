"""Errors the weight store raises; each says what is wrong and what to do about it."""

from __future__ import annotations


class WeightStoreError(RuntimeError):
    """Base class of every weight-store failure."""


class ObjectNotFound(WeightStoreError, KeyError):
    """A key that the manifest names is not in the store (deleted, or never uploaded)."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else "object not found"


class CorruptObject(WeightStoreError):
    """An object's bytes do not match what its manifest promises (size, zstd frame or checksum)."""


class BaseMismatch(WeightStoreError):
    """A delta was offered to a reader that does not hold the version the delta is based on."""


class NoUsableVersion(WeightStoreError):
    """Nothing in the store can be rebuilt: no complete snapshot, or every snapshot is broken."""


class UnknownStoreScheme(WeightStoreError, ValueError):
    """No installed store plugin accepts the URL's scheme."""
