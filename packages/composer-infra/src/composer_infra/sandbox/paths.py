"""Host-side file access that cannot leave the workspace.

The file tools run on the host, against the workspace directory, so that reading a
file costs a syscall rather than a sandboxed process. The model may have planted
symlinks (`ln -s /etc x`) or `..` paths; every lookup here walks the path one
component at a time through directory file descriptors with `O_NOFOLLOW`, resolving
symlinks itself and refusing any that point out of the workspace. Because nothing is
resolved by the kernel across a component, swapping a directory for a symlink between
check and use gains nothing (the race `realpath` + `open` would have).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from composer_infra.sandbox.tree import Entry, file_kind, walk

SANDBOX_ROOT = "/workspace"
"""Where the workspace is mounted inside every isolated sandbox."""

_MAX_SYMLINKS = 40
_T = TypeVar("_T")


def display_name(name: str) -> str:
    """A file name as one unambiguous, serialisable line.

    Names of plain printable text are shown as they are; any other (control
    characters, bytes that are not UTF-8, which `os.listdir` hands over as lone
    surrogates, a ` -> ` or ` [` that would read as a link or a type, quotes,
    backslashes, edge spaces) is double-quoted with backslash escapes (`\\n`,
    `\\xff` for a raw byte).
    """
    raw = name.encode("utf-8", "surrogateescape")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if (
        text is not None
        and text.isprintable()
        and not any(mark in text for mark in (" -> ", " [", '"', "\\"))
        and text == text.strip()
    ):
        return text
    out = []
    for char in raw.decode("utf-8", "surrogateescape"):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif not char.isprintable() and char != " ":
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def describe_entry(entry: Entry) -> str:
    """One `list_files` line for a walked entry."""
    parts = entry.relative.split("/")
    shown = "/".join(display_name(p) for p in parts)
    kind = entry.kind
    if kind == "dir":
        return shown + "/"
    if kind == "file":
        return shown
    if kind == "symlink":
        return f"{shown} -> {display_name(entry.link_target or '')}"
    return f"{shown} [{kind}]"


def _refuse_special(dir_fd: int, name: str, path: str) -> None:
    """PathError when `name` exists and is neither a regular file nor a symlink."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    kind = file_kind(info.st_mode)
    if kind == "dir":
        raise PathError(f"{path!r} is a directory, not a file")
    if kind not in ("file", "symlink"):
        raise PathError(
            f"{path!r} is a {kind}, not a regular file; only regular files can be written"
        )


class PathError(ValueError):
    """A path the agent gave cannot be used; the message says why, for the model to read."""


def split_workspace_path(path: str) -> list[str]:
    """Components of a workspace path: relative, or absolute under /workspace."""
    if not isinstance(path, str) or not path:
        raise PathError("path must be a non-empty string")
    if "\x00" in path:
        raise PathError("path must not contain NUL bytes")
    if path.startswith("/"):
        if path == SANDBOX_ROOT or path.startswith(SANDBOX_ROOT + "/"):
            path = path[len(SANDBOX_ROOT) :]
        else:
            raise PathError(
                f"{path!r} is outside the workspace; use a path relative to the workspace "
                f"or one under {SANDBOX_ROOT}/"
            )
    return [part for part in path.split("/") if part not in ("", ".")]


class WorkspaceFS:
    """File operations confined to one workspace directory.

    `owner` is the (uid, gid) that sandbox commands run as; files created here are
    given to it so the sandbox can change them.
    """

    def __init__(self, root: Path, owner: tuple[int, int] | None = None) -> None:
        self.root = Path(root)
        self.owner = owner

    # -- the walk ------------------------------------------------------------------

    def _locate(
        self,
        path: str,
        final: Callable[[int, str], _T],
        *,
        create_parents: bool = False,
    ) -> _T:
        """Walk to the parent of `path` inside the workspace and call `final(dir_fd, name)`.

        `final` must open its target with O_NOFOLLOW; when it raises ELOOP (the last
        component is a symlink) the link is resolved here and the walk goes on.
        """
        todo = deque(split_workspace_path(path))
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        stack = [root_fd]
        hops = 0
        try:
            while True:
                while todo and todo[0] == "..":
                    todo.popleft()
                    if len(stack) == 1:
                        raise PathError(f"{path!r} leads outside the workspace")
                    os.close(stack.pop())
                if not todo:
                    return final(stack[-1], ".")
                if len(todo) == 1:
                    name = todo[0]
                    try:
                        return final(stack[-1], name)
                    except OSError as exc:
                        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR):
                            raise
                        if not self._is_symlink(stack[-1], name):
                            raise
                    todo.popleft()
                    hops = self._splice_link(stack, todo, name, hops, path)
                    continue
                name = todo.popleft()
                try:
                    fd = os.open(
                        name,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=stack[-1],
                    )
                except FileNotFoundError:
                    if not create_parents:
                        raise PathError(f"{path!r}: directory {name!r} does not exist") from None
                    os.mkdir(name, 0o755, dir_fd=stack[-1])
                    fd = os.open(
                        name,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=stack[-1],
                    )
                    self._give(fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    if not self._is_symlink(stack[-1], name):
                        raise PathError(f"{path!r}: {name!r} is not a directory") from None
                    hops = self._splice_link(stack, todo, name, hops, path)
                    continue
                stack.append(fd)
        finally:
            for fd in stack:
                os.close(fd)

    @staticmethod
    def _is_symlink(dir_fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def _splice_link(
        self, stack: list[int], todo: deque[str], name: str, hops: int, path: str
    ) -> int:
        """Put a symlink's target in front of the components still to walk."""
        hops += 1
        if hops > _MAX_SYMLINKS:
            raise PathError(f"{path!r}: too many levels of symbolic links")
        target = os.readlink(name, dir_fd=stack[-1])
        if target.startswith("/"):
            if not (target == SANDBOX_ROOT or target.startswith(SANDBOX_ROOT + "/")):
                raise PathError(
                    f"{path!r}: symlink {name!r} points outside the workspace ({target})"
                )
            while len(stack) > 1:
                os.close(stack.pop())
            target = target[len(SANDBOX_ROOT) :]
        parts = [p for p in target.split("/") if p not in ("", ".")]
        todo.extendleft(reversed(parts))
        return hops

    def _give(self, fd: int) -> None:
        if self.owner is not None:
            os.fchown(fd, *self.owner)

    # -- operations ----------------------------------------------------------------

    def read_bytes(self, path: str, limit: int) -> bytes:
        """The file's bytes; PathError if it is missing, not a file or bigger than `limit`."""

        def final(dir_fd: int, name: str) -> bytes:
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it would hang the
            # host and hold the sandbox's lock); it is refused right after, by its type.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=dir_fd)
            try:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    raise PathError(f"{path!r} is a directory; use list_files")
                if not stat.S_ISREG(info.st_mode):
                    raise PathError(
                        f"{path!r} is a {file_kind(info.st_mode)}, not a regular file; "
                        "only regular files can be read"
                    )
                if info.st_size > limit:
                    raise PathError(
                        f"{path!r} is {info.st_size} bytes, more than the {limit}-byte read limit"
                    )
                with os.fdopen(os.dup(fd), "rb") as handle:
                    return handle.read(limit + 1)[:limit]
            finally:
                os.close(fd)

        return self._guard(path, lambda: self._locate(path, final))

    def write_bytes(self, path: str, content: bytes) -> None:
        """Create or replace a file, making missing parent directories."""

        def final(dir_fd: int, name: str) -> None:
            if name == ".":
                raise PathError(f"{path!r} is the workspace directory, not a file")
            _refuse_special(dir_fd, name, path)
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a FIFO nobody reads (made after the check)
                    raise PathError(f"{path!r} is a fifo, not a regular file") from None
                raise
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise PathError(
                        f"{path!r} is a {file_kind(info.st_mode)}, not a regular file; "
                        "only regular files can be written"
                    )
                os.ftruncate(fd, 0)
                self._give(fd)
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)

        self._guard(path, lambda: self._locate(path, final, create_parents=True))

    def list_dir(self, path: str, limit: int = 2000) -> tuple[list[str], bool]:
        """Everything under `path`, recursively, relative to it, one entry a line.

        Directories end in '/', symlinks read `name -> target` (described, never
        followed), other special files `name [fifo]` / `[socket]` / `[char-device]`.
        A name that could be misread (a newline, bytes that are not UTF-8, ` -> `, a
        quote) is written as a double-quoted string with backslash escapes, so every
        line is one entry and the text always serialises. `.git` is listed, not
        entered. Returns the entries and whether the list was cut at `limit`.
        """

        def final(dir_fd: int, name: str) -> tuple[list[str], bool]:
            fd = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
            entries: list[str] = []
            cut = False
            try:
                for entry in walk(fd, skip_dirs=frozenset({".git"})):
                    entries.append(describe_entry(entry))
                    if len(entries) > limit:
                        cut = True
                        break
            finally:
                os.close(fd)
            return sorted(entries)[:limit], cut

        return self._guard(path, lambda: self._locate(path, final))

    @staticmethod
    def _guard(path: str, action: Callable[[], _T]) -> _T:
        """Turn OS errors into PathErrors the model can act on."""
        try:
            return action()
        except PathError:
            raise
        except FileNotFoundError:
            raise PathError(f"{path!r} does not exist") from None
        except NotADirectoryError:
            raise PathError(f"{path!r} is not a directory") from None
        except IsADirectoryError:
            raise PathError(f"{path!r} is a directory") from None
        except PermissionError:
            raise PathError(f"{path!r}: permission denied") from None
        except OSError as exc:
            raise PathError(f"{path!r}: {exc.strerror or exc}") from None
