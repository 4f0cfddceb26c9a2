"""Pieces the built-in backends share: sandbox users and the host paths they may read."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from composer_infra.sandbox.tree import DirCache, walk

SANDBOX_UID_BASE = 200_000
SANDBOX_UID_SPAN = 100_000


def allocate_owner() -> tuple[int, int] | None:
    """A fresh unprivileged uid/gid for a sandbox when we are root, else None (our own).

    Root is exempt from RLIMIT_NPROC, so a fork bomb run as root (even as root mapped
    into a user namespace) would not be bounded. Each sandbox gets its own uid, which
    also keeps one sandbox's process count from eating another's.
    """
    if os.geteuid() != 0:
        return None
    uid = SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_SPAN)
    return uid, uid


def processes_of_current_user() -> int:
    """How many processes our real uid has now (what RLIMIT_NPROC counts)."""
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def give_tree(root: Path, owner: tuple[int, int] | None) -> None:
    """Hand a workspace tree to the sandbox user (without following symlinks)."""
    if owner is None:
        return
    os.chown(root, *owner, follow_symlinks=False)
    with DirCache(root) as dirs:
        for entry in walk(root):  # iterative: a restored 1,500-level tree is fine
            fd, name = dirs.of(entry.relative)
            os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)


def find_tool(name: str) -> str | None:
    """A system tool every backend runs inside the sandbox (prlimit, setpriv)."""
    return shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")


PASSWD_TEMPLATE = (
    "root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:sandbox:/workspace:/bin/sh\n"
)
GROUP_TEMPLATE = "root:x:0:\nsandbox:x:{gid}:\n"

# Host files under /etc a program needs to start and that hold no secrets.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
)
ETC_DIRS = ("/etc/alternatives", "/etc/ld.so.conf.d", "/etc/ssl", "/etc/python3")
