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
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import zstandard
from pydantic import BaseModel, ConfigDict

from composer_infra.sandbox.tree import SETID_BITS, DirCache, split_parent, walk

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
        """Archive a tree as it is: links as links, FIFOs as FIFOs, never followed.

        Iterative (`tree.walk`), so depth is no limit; set-id bits are cleared; a
        socket (which a tar cannot hold, and which means nothing without its
        listener) is left out.
        """
        top = tarfile.TarInfo(prefix)
        top.type = tarfile.DIRTYPE
        top.mode = stat.S_IMODE(os.lstat(root).st_mode) & ~SETID_BITS
        tar.addfile(_normalised(top))
        with DirCache(root) as dirs:
            for entry in walk(root):
                info = tarfile.TarInfo(f"{prefix}/{entry.relative}")
                info.mode = stat.S_IMODE(entry.info.st_mode) & ~SETID_BITS
                info.mtime = int(entry.info.st_mtime)
                kind = entry.kind
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(_normalised(info))
                elif kind == "symlink":
                    info.type = tarfile.SYMTYPE
                    info.linkname = entry.link_target or ""
                    tar.addfile(_normalised(info))
                elif kind == "fifo":
                    info.type = tarfile.FIFOTYPE
                    tar.addfile(_normalised(info))
                elif kind == "file":
                    fd, name = dirs.of(entry.relative)
                    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                    file_fd = os.open(name, flags, dir_fd=fd)
                    with os.fdopen(file_fd, "rb") as handle:
                        status = os.fstat(handle.fileno())
                        if not stat.S_ISREG(status.st_mode):
                            continue
                        info.size = status.st_size
                        tar.addfile(_normalised(info), _Exactly(handle, status.st_size))

    def load(self, digest: str, destination: Path) -> tuple[dict[str, Any], Path, Path | None]:
        """Check and unpack a snapshot into `destination`.

        Returns (state, workspace dir, memory image dir or None). The digest is verified
        before anything is unpacked, and unpacking (`_extract`) puts every member inside
        a directory it made itself, so a crafted archive cannot write outside
        `destination` or make device files; symlinks (any target) and FIFOs come back
        as they were, never followed.
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
                _extract(tar, destination)
        except (tarfile.TarError, zstandard.ZstdError, SnapshotError, OSError) as exc:
            raise SnapshotError(f"snapshot {path} cannot be unpacked: {exc}") from exc
        state_file = destination / STATE_MEMBER
        if not state_file.is_file():
            raise SnapshotError(f"snapshot {path} has no {STATE_MEMBER}")
        state = json.loads(state_file.read_text())
        memory = destination / MEMORY_PREFIX
        return state, destination / WORKSPACE_PREFIX, memory if memory.is_dir() else None


class _Exactly(io.RawIOBase):
    """A file read as exactly `size` bytes: a file that grew or shrank while it was being
    archived (a command still running) must not break the tar stream."""

    def __init__(self, handle: io.BufferedReader, size: int) -> None:
        self._handle = handle
        self._left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        want = self._left if n is None or n < 0 else min(n, self._left)
        data = self._handle.read(want)
        data += b"\0" * (want - len(data))
        self._left -= len(data)
        return data


def _member_path(name: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts or not parts:
        raise SnapshotError(f"snapshot member {name!r} is not a plain relative path")
    return "/".join(parts)


def _extract(tar: tarfile.TarFile, destination: Path) -> None:
    """Unpack members one by one, each into a directory this function made.

    A member's parent must be a directory unpacked before it (never a symlink), so no
    member can be led out of `destination`; only directories, regular files, symlinks
    (stored as they are, whatever they point at) and FIFOs are made.
    """
    made: set[str] = {""}
    dirs = DirCache(destination)
    try:
        for member in tar:
            relative = _member_path(member.name)
            parent, _ = split_parent(relative)
            if parent not in made:
                raise SnapshotError(f"snapshot member {member.name!r} comes before its directory")
            fd, name = dirs.of(relative)
            mode = member.mode & 0o777
            if member.isdir():
                if relative not in made:
                    os.mkdir(name, 0o700, dir_fd=fd)
                    made.add(relative)
                os.chmod(name, mode | stat.S_IRWXU, dir_fd=fd)
            elif member.isreg():
                source = tar.extractfile(member)
                assert source is not None
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                with os.fdopen(os.open(name, flags, 0o600, dir_fd=fd), "wb") as out:
                    while block := source.read(1 << 20):
                        out.write(block)
                    os.fchmod(out.fileno(), mode)
            elif member.issym():
                os.symlink(member.linkname, name, dir_fd=fd)
            elif member.isfifo():
                os.mkfifo(name, mode, dir_fd=fd)
            else:
                raise SnapshotError(
                    f"snapshot member {member.name!r} is a kind of file a snapshot never holds"
                )
    finally:
        dirs.close()
