"""A size-limited filesystem for each workspace.

RLIMIT_FSIZE bounds one file; a policy writing many files (1,000 MiB in total
against a 256 MiB file cap) fills the host's disk. When the host side runs as root,
each workspace is a tmpfs of `ResourceLimits.workspace_bytes`: writes past it fail
with ENOSPC inside the sandbox and on the host's file tools alike. The pages are
memory (charged to the writer's memory cgroup where sandboxes have one), which
suits the small repositories of coding tasks.

Without root (no CAP_SYS_ADMIN to mount) the workspace is a plain directory and
only the per-file limit holds; `workspace_mount_unavailable()` says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
from pathlib import Path

_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def workspace_mount_unavailable() -> str | None:
    """None when workspaces get their own size-limited tmpfs here, else why not."""
    if os.geteuid() != 0:
        return "not root: the workspace is a plain directory, bounded per file (RLIMIT_FSIZE) only"
    return None


def mount_workspace(path: Path, size_bytes: int) -> bool:
    """Mount a tmpfs of `size_bytes` (nosuid, nodev) on the empty directory `path`.

    Returns False where mounting is not possible (see `workspace_mount_unavailable`).
    """
    if workspace_mount_unavailable() is not None:
        return False
    options = f"size={size_bytes},mode=0755".encode()
    result = _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options)
    if result != 0:
        code = ctypes.get_errno()
        if code == errno.EPERM:
            return False  # root without CAP_SYS_ADMIN (a container): plain directory
        raise OSError(code, f"cannot mount the workspace tmpfs: {os.strerror(code)}", str(path))
    return True


def unmount(path: Path) -> None:
    """Detach the workspace's tmpfs (lazily: a process still in it cannot keep it busy)."""
    if os.path.ismount(path) and _libc().umount2(os.fsencode(path), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot unmount the workspace: {os.strerror(code)}", str(path))
