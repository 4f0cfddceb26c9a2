"""Crash-safe file-system primitives the checkpoints are built on.

Three patterns, all relying on rename/link being atomic on POSIX file systems:

- `atomic_write_bytes`: replace a file; a crash leaves the old one or the new one.
- `write_once_bytes`: create a file that must never be replaced (hard link of a
  finished temp file; fails if the name exists), for append-only records.
- `atomic_directory`: build a directory under a temp name and rename it into place,
  so a reader never sees half of it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from composer_infra.store.objects import atomic_write_bytes, fsync_dir

TEMP_PREFIX = ".tmp-"


def write_once_bytes(path: Path, data: bytes) -> None:
    """Create `path` with `data`; raise `FileExistsError` if it already exists.

    The data is complete and synced before the name appears, so a crash leaves either
    no file or the whole file, and an existing record is never overwritten.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TEMP_PREFIX}{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (bottom-up)."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


@contextlib.contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temp directory next to `final`; on success, sync it and rename it to `final`.

    `final` must not exist yet (callers give each directory a unique name). On an
    exception the temp directory is removed; after a crash, `remove_temp_entries` does it.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise FileExistsError(f"{final} exists; atomic directories are never replaced")
    tmp = final.parent / f"{TEMP_PREFIX}{final.name}.{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)
        os.rename(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_directory(path: Path) -> None:
    """Delete a directory so that a crash never leaves half of it under its own name.

    It is first renamed to a temp name (atomic), then removed; a crash in between leaves
    a temp entry that `remove_temp_entries` clears on the next start.
    """
    doomed = path.parent / f"{TEMP_PREFIX}deleting-{path.name}.{uuid.uuid4().hex[:8]}"
    os.rename(path, doomed)
    fsync_dir(path.parent)
    shutil.rmtree(doomed, ignore_errors=True)


def remove_temp_entries(directory: Path) -> int:
    """Delete what crashed writers left behind in `directory`; returns how many."""
    removed = 0
    if not directory.exists():
        return 0
    for entry in directory.iterdir():
        if entry.name.startswith(TEMP_PREFIX):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    return removed


__all__ = [
    "atomic_directory",
    "atomic_write_bytes",
    "fsync_tree",
    "remove_directory",
    "remove_temp_entries",
    "write_once_bytes",
]
