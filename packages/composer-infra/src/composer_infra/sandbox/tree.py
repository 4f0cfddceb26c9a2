"""Walking, copying and deleting workspace trees that a hostile policy shaped.

A workspace may hold anything a command can make: a 1,500-level directory chain,
FIFOs and sockets, absolute and outward symlinks, names with newlines or bytes that
are not UTF-8, files made set-uid. Python 3.11's `os.walk`, `os.fwalk`,
`shutil.copytree` and `shutil.rmtree` recurse once per level (RecursionError past
about 1,000), follow or choke on special files, and open FIFOs. Everything here is
iterative (an explicit stack of directory descriptors), never follows a symlink,
never opens anything but regular files and directories, and clears set-id bits on
what it copies out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SETID_BITS = stat.S_ISUID | stat.S_ISGID
"""Bits never carried out of a sandbox: a set-uid file copied by root stays set-uid."""


@dataclass(frozen=True)
class Entry:
    """One thing under a walked root: its path relative to the root (as bytes-safe str),
    and its lstat result. Symlinks are entries, never followed."""

    relative: str
    info: os.stat_result
    link_target: str | None = None
    """What a symlink holds (read, never followed); None for anything else."""

    @property
    def kind(self) -> str:
        return file_kind(self.info.st_mode)


def file_kind(mode: int) -> str:
    """`dir`, `file`, `symlink`, `fifo`, `socket`, `char-device`, `block-device`."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char-device"
    return "block-device"


_CHUNK = 2048
"""Bytes of relative path opened in one `openat` (under PATH_MAX, 4096)."""


def _chunks(relative: str) -> list[str]:
    """`relative` cut at component boundaries into pieces short enough for one syscall."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for part in relative.split("/"):
        if current and size + len(part.encode(errors="surrogateescape")) + 1 > _CHUNK:
            pieces.append("/".join(current))
            current, size = [], 0
        current.append(part)
        size += len(part.encode(errors="surrogateescape")) + 1
    if current:
        pieces.append("/".join(current))
    return pieces


class DirOpener:
    """Open directories of one tree by relative path, at any depth, cheaply.

    Keeps the descriptors of the `size` directories opened last; a path is opened
    from its nearest kept ancestor, the rest a chunk at a time (a 1,500-level path is
    longer than PATH_MAX), the last component of each chunk with O_NOFOLLOW. With
    `known` (the (dev, inode) of each directory as it was listed) every chunk must
    land on the directory that was listed, so a component swapped for a symlink
    mid-walk leads nowhere. A depth-first walk opens each child from its parent, so a
    deep chain costs one `openat` a level.
    """

    def __init__(
        self, root_fd: int, known: dict[str, tuple[int, int]] | None = None, size: int = 32
    ) -> None:
        self.known = known
        self.size = size
        self._fds: dict[str, int] = {"": os.dup(root_fd)}

    def open(self, relative: str) -> int:
        """A descriptor of `relative`, owned by this opener (valid until `close`)."""
        if relative in self._fds:
            fd = self._fds.pop(relative)
            self._fds[relative] = fd  # most recently used last
            return fd
        for cached, cached_fd in list(self._fds.items()):
            if cached and split_parent(cached)[0] == relative:
                # Walking back up (deepest first): the parent is one `..` away.
                fd = os.open("..", _DIR_FLAGS, dir_fd=cached_fd)
                if self.known is not None:
                    info = os.fstat(fd)
                    if self.known.get(relative) != (info.st_dev, info.st_ino):
                        os.close(fd)
                        raise FileNotFoundError(errno.ENOENT, "directory moved", relative)
                return self._keep(relative, fd)
        base = relative
        while base and base not in self._fds:
            base = split_parent(base)[0]
        rest = relative[len(base) :].lstrip("/")
        fd = os.dup(self._fds[base])
        done = base
        try:
            for piece in _chunks(rest):
                next_fd = os.open(piece, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = next_fd
                done = f"{done}/{piece}" if done else piece
                if self.known is not None:
                    info = os.fstat(fd)
                    if self.known.get(done) != (info.st_dev, info.st_ino):
                        raise FileNotFoundError(errno.ENOENT, "directory changed mid-walk", done)
        except BaseException:
            os.close(fd)
            raise
        return self._keep(relative, fd)

    def _keep(self, relative: str, fd: int) -> int:
        self._fds[relative] = fd
        while len(self._fds) > self.size:
            oldest = next(key for key in self._fds if key)
            os.close(self._fds.pop(oldest))
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def split_parent(relative: str) -> tuple[str, str]:
    """(parent, name) of a relative path; the parent of a top-level name is ''."""
    parent, _, name = relative.rpartition("/")
    return parent, name


def walk(root: Path | str | int, *, skip_dirs: frozenset[str] = frozenset()) -> Iterator[Entry]:
    """Every entry under `root` (not `root` itself), parents before children, sorted.

    Depth-first with an explicit stack, and each directory is read whole and closed
    before its children are visited, so neither depth nor width costs recursion or
    held descriptors. Directories named in `skip_dirs` are yielded, not entered.
    Entries that vanish or change during the walk (a command still running) are
    skipped, never followed.
    """
    pending: list[str] = [""]
    root_fd = os.dup(root) if isinstance(root, int) else os.open(root, _DIR_FLAGS)
    root_info = os.fstat(root_fd)
    known: dict[str, tuple[int, int]] = {"": (root_info.st_dev, root_info.st_ino)}
    opener = DirOpener(root_fd, known)
    try:
        while pending:
            relative = pending.pop()
            try:
                fd = opener.open(relative)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES):
                    continue
                raise
            try:
                entries = []
                # listdir on a dup: it rewinds nothing, and the kept fd stays at 0.
                for name in sorted(os.listdir(fd)):
                    try:
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        link = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(info.st_mode) else None
                    except (FileNotFoundError, OSError):
                        continue
                    entries.append((name, info, link))
            finally:
                pass
            children = []
            for name, info, link in entries:
                path = f"{relative}/{name}" if relative else name
                yield Entry(path, info, link)
                if stat.S_ISDIR(info.st_mode) and name not in skip_dirs:
                    known[path] = (info.st_dev, info.st_ino)
                    children.append(path)
            pending.extend(reversed(children))
    finally:
        opener.close()
        os.close(root_fd)


class DirCache:
    """Parent-directory descriptors of one tree (see `DirOpener`), for acting on walked
    entries by (parent descriptor, name) instead of by a path that may be too long."""

    def __init__(self, root: Path | str, known: dict[str, tuple[int, int]] | None = None) -> None:
        root_fd = os.open(root, _DIR_FLAGS)
        try:
            if known is not None:
                info = os.fstat(root_fd)
                known = {**known, "": (info.st_dev, info.st_ino)}
            self._opener = DirOpener(root_fd, known)
        finally:
            os.close(root_fd)

    def of(self, relative: str) -> tuple[int, str]:
        """(descriptor of the parent directory, last component) of `relative`."""
        parent, name = split_parent(relative)
        return self._opener.open(parent), name

    def close(self) -> None:
        self._opener.close()

    def __enter__(self) -> DirCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remove_tree(root: Path | str) -> None:
    """Delete `root` and everything under it, however deep; missing is fine.

    Everything is listed first (`walk`), then unlinked through parent descriptors and
    the directories removed deepest first, so depth needs no recursion and no long
    path. Directories are made writable first (a command may have chmod'ed them 0500).
    """
    root = Path(root)
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        root.unlink()
        return
    with contextlib.suppress(OSError):
        os.chmod(root, 0o700)
    entries = list(walk(root))
    known = {e.relative: (e.info.st_dev, e.info.st_ino) for e in entries if e.kind == "dir"}
    with DirCache(root, known) as dirs:
        for entry in entries:
            if entry.kind == "dir":
                fd, name = dirs.of(entry.relative)
                with contextlib.suppress(OSError):
                    os.chmod(name, 0o700, dir_fd=fd)
        for entry in entries:
            if entry.kind != "dir":
                fd, name = dirs.of(entry.relative)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
        for entry in reversed(entries):
            if entry.kind == "dir":
                fd, name = dirs.of(entry.relative)
                os.rmdir(name, dir_fd=fd)
    os.rmdir(root)


def _copy_file(src_fd: int, name: str, dst_fd: int, mode: int) -> bool:
    """Copy one regular file between directories; False if it is no longer one."""
    in_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
    try:
        if not stat.S_ISREG(os.fstat(in_fd).st_mode):
            return False  # swapped for something else mid-copy: leave it out
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out_fd = os.open(name, flags, 0o600, dir_fd=dst_fd)
        try:
            while os.sendfile(out_fd, in_fd, None, 1 << 24):
                pass
            os.fchmod(out_fd, mode)
        finally:
            os.close(out_fd)
        return True
    finally:
        os.close(in_fd)


def make_socket_file(dir_fd: int, name: str) -> None:
    """A socket inode `name` in `dir_fd` (what a listener leaves; nothing listens on it)."""
    before = os.open(".", _DIR_FLAGS)
    try:
        os.fchdir(dir_fd)  # bind() takes a path of at most 107 bytes
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(name)
    finally:
        os.fchdir(before)
        os.close(before)


def copy_tree(
    source: Path, target: Path, owner: tuple[int, int] | None = None, *, exist_ok: bool = False
) -> list[str]:
    """Copy a workspace faithfully: files, directories, symlinks as links (any target,
    never followed), FIFOs and sockets as new ones. Set-id bits are cleared.

    `target` must not exist (or, with `exist_ok`, be an empty directory: a mounted
    workspace). Devices (which no sandbox can make) are left out; their paths are
    returned so the caller can say so.
    """
    if not (exist_ok and target.is_dir()):
        os.mkdir(target, 0o700)
    left_out: list[str] = []
    with DirCache(source) as sources, DirCache(target) as targets:
        for entry in walk(source):
            src_fd, name = sources.of(entry.relative)
            dst_fd, _ = targets.of(entry.relative)
            mode = stat.S_IMODE(entry.info.st_mode) & ~SETID_BITS
            kind = entry.kind
            if kind == "dir":
                # Always writable by its owner (us): a 0500 directory is still filled.
                os.mkdir(name, 0o700, dir_fd=dst_fd)
                os.chmod(name, mode | stat.S_IRWXU, dir_fd=dst_fd)
            elif kind == "file":
                if not _copy_file(src_fd, name, dst_fd, mode):
                    left_out.append(entry.relative)
                    continue
            elif kind == "symlink":
                os.symlink(entry.link_target or "", name, dir_fd=dst_fd)
            elif kind == "fifo":
                os.mkfifo(name, mode, dir_fd=dst_fd)
            elif kind == "socket":
                make_socket_file(dst_fd, name)
            else:
                left_out.append(entry.relative)
                continue
            if owner is not None:
                os.chown(name, *owner, dir_fd=dst_fd, follow_symlinks=False)
    os.chmod(target, (stat.S_IMODE(os.lstat(source).st_mode) & ~SETID_BITS) | stat.S_IRWXU)
    if owner is not None:
        os.chown(target, *owner)
    return left_out


def strip_setid(root: Path) -> int:
    """Clear set-uid and set-gid bits on every file and directory under `root`.

    Returns how many were cleared. Run on what a sandbox leaves before anything of
    it is copied out or handed to the host.
    """
    cleared = 0
    with DirCache(root) as dirs:
        for entry in walk(root):
            if entry.kind in ("file", "dir") and entry.info.st_mode & SETID_BITS:
                fd, name = dirs.of(entry.relative)
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(name, stat.S_IMODE(entry.info.st_mode) & ~SETID_BITS, dir_fd=fd)
                    cleared += 1
    return cleared
