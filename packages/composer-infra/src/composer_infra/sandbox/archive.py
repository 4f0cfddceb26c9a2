"""Content-addressed snapshots: a sandbox's state as one `<sha256>.tar.zst` file.

A snapshot holds the workspace, the sandbox's own state (task, todo list, finish)
and, for memory-level backends, the checkpoint image of its processes. The name is
the SHA-256 of the compressed bytes, so the same state stored twice is one file, a
file that was changed in transit fails to load, and a snapshot can be moved between
machines through any directory (or object store) by name alone.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import zstandard
from pydantic import BaseModel, ConfigDict

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
STATE_MEMBER = "sandbox.json"
WORKSPACE_PREFIX = "workspace"
MEMORY_PREFIX = "memory"


class SnapshotError(RuntimeError):
    """A snapshot is missing, corrupt, or does not fit where it is being restored."""


class Snapshot(BaseModel):
    """A stored snapshot: its digest (the name) and what restoring it needs."""

    model_config = ConfigDict(frozen=True)

    digest: str
    backend: str
    memory: bool
    size_bytes: int


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Owner-free entries, so a snapshot's bytes do not depend on the sandbox's uid."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


class SnapshotStore:
    """A directory of snapshots, named by content. Share the directory to migrate sandboxes."""

    def __init__(self, root: Path | str, *, level: int = 3) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.level = level

    def path(self, digest: str) -> Path:
        if not _DIGEST.match(digest):
            raise SnapshotError(f"{digest!r} is not a snapshot digest (64 lowercase hex digits)")
        return self.root / f"{digest}.tar.zst"

    def put(self, state: dict[str, Any], workspace: Path, memory: Path | None = None) -> Snapshot:
        """Archive `workspace` (and a memory image directory) with `state`; return its digest."""
        fd, tmp_name = tempfile.mkstemp(dir=self.root, prefix=".incoming-", suffix=".tar.zst")
        tmp = Path(tmp_name)
        try:
            with (
                os.fdopen(fd, "wb") as raw,
                zstandard.ZstdCompressor(level=self.level).stream_writer(raw) as zstd_out,
                tarfile.open(fileobj=zstd_out, mode="w|", format=tarfile.PAX_FORMAT) as tar,
            ):
                body = json.dumps(state, sort_keys=True).encode()
                info = tarfile.TarInfo(STATE_MEMBER)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
                self._add_tree(tar, workspace, WORKSPACE_PREFIX)
                if memory is not None:
                    self._add_tree(tar, memory, MEMORY_PREFIX)
            digest = _sha256(tmp)
            final = self.path(digest)
            size = tmp.stat().st_size
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return Snapshot(
            digest=digest,
            backend=str(state.get("backend", "")),
            memory=memory is not None,
            size_bytes=size,
        )

    @staticmethod
    def _add_tree(tar: tarfile.TarFile, root: Path, prefix: str) -> None:
        tar.add(root, arcname=prefix, recursive=False, filter=_normalised)
        for top, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                full = Path(top) / name
                arcname = f"{prefix}/{full.relative_to(root).as_posix()}"
                tar.add(full, arcname=arcname, recursive=False, filter=_normalised)

    def load(self, digest: str, destination: Path) -> tuple[dict[str, Any], Path, Path | None]:
        """Check and unpack a snapshot into `destination`.

        Returns (state, workspace dir, memory image dir or None). The digest is verified
        before anything is unpacked, and unpacking uses tarfile's `data` filter, so a
        crafted archive cannot write outside `destination` or make device files.
        """
        path = self.path(digest)
        if not path.exists():
            raise SnapshotError(f"snapshot {digest} is not in {self.root}")
        actual = _sha256(path)
        if actual != digest:
            raise SnapshotError(
                f"snapshot {path} is corrupt: its SHA-256 is {actual}, not {digest}"
            )
        destination.mkdir(parents=True, exist_ok=True)
        try:
            with (
                path.open("rb") as handle,
                zstandard.ZstdDecompressor().stream_reader(handle) as zstd_in,
                tarfile.open(fileobj=zstd_in, mode="r|") as tar,
            ):
                tar.extractall(destination, filter="data")
        except (tarfile.TarError, zstandard.ZstdError) as exc:
            raise SnapshotError(f"snapshot {path} cannot be unpacked: {exc}") from exc
        state_file = destination / STATE_MEMBER
        if not state_file.is_file():
            raise SnapshotError(f"snapshot {path} has no {STATE_MEMBER}")
        state = json.loads(state_file.read_text())
        memory = destination / MEMORY_PREFIX
        return state, destination / WORKSPACE_PREFIX, memory if memory.is_dir() else None
