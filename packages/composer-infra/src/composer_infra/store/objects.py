"""The object-store interface the weight store writes through, and its `file://` implementation.

An object store is a flat map from string keys (``/``-separated) to immutable bytes. It is
the only thing the publisher and subscriber need from a storage backend, so a new backend
(GCS, Azure, a cluster file system) is one small class plus a `composer_open_store` hook.

The one property every implementation must give is *atomic visibility*: a reader either
sees the complete object or no object at all. The manifest-written-last protocol of the
weight store relies on it for the manifest; for data objects it makes a crash harmless.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

from composer_infra.store.errors import ObjectNotFound


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key -> bytes store with atomic puts."""

    url: str

    def put(self, key: str, data: bytes) -> None:
        """Store `data` under `key`, replacing any previous object, atomically."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes under `key`; raises `ObjectNotFound` if there are none."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Every key that starts with `prefix`, sorted."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key`; a missing key is not an error."""
        ...


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (POSIX needs the directory itself synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one.

    Temp file in the same directory, fsync, rename over the target, fsync the directory.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


class FileStore:
    """Objects as files under a root directory (the default store, under the run directory)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"object key {key!r} must be a relative path without '..'")
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        atomic_write_bytes(self._path(key), data)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.url}/{key} does not exist") from None

    def list(self, prefix: str = "") -> list[str]:
        keys = []
        for path in self.root.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def __repr__(self) -> str:
        return f"FileStore({str(self.root)!r})"
