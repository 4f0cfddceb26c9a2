"""Per-sandbox control groups: a memory and a process budget for all of a sandbox's
processes together, and a way to kill every one of them that no process can dodge.

rlimits bound one process at a time (four processes under a 2 GiB RLIMIT_AS hold
8 GiB together); a cgroup bounds their sum, and `cgroup.procs` names every process
in it whatever it calls itself and however fast it forks.

Both cgroup layouts are handled:

- **v2** (unified, `/sys/fs/cgroup/cgroup.controllers` exists): a child of our own
  cgroup with `memory.max`, `memory.swap.max = 0`, `pids.max`; killed with
  `cgroup.kill` (Linux 5.14+; else frozen with `cgroup.freeze` and killed). The
  `memory` and `pids` controllers must be enabled in our cgroup's
  `cgroup.subtree_control`, which cgroup v2 allows only in a cgroup holding no
  processes: run the host side in a delegated systemd scope, e.g.
  `systemd-run --user --scope -p Delegate=yes ...` (or as a service with
  `Delegate=yes`); we then create `composer-leaf` for ourselves and enable them.
- **v1** (`/sys/fs/cgroup/memory`, `/pids`, `/freezer` mounted separately, as on
  this development box): a child in each, `memory.limit_in_bytes` (and
  `memory.memsw.limit_in_bytes` where swap is accounted), `pids.max`; killed by
  freezing (`freezer.state`), SIGKILL of each listed process, thawing, until empty.

Creating cgroups needs write access to our cgroup directory (root, or a delegated
subtree). Without it, `cgroup_unavailable()` says why, the sandbox runs with
rlimits only (per process, not per sandbox), and docs/infra/containment.md says what
that leaves open.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import secrets
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
ENTER_SCRIPT = (
    'while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; '
    'shift; exec "$@"'
)
"""`sh -c` script that moves itself into each cgroup given before `--`, then runs the rest."""


def _own_paths() -> dict[str, str]:
    """Our cgroup path in each hierarchy, from /proc/self/cgroup ('' for v2)."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


@functools.cache
def _layout() -> tuple[str, dict[str, Path]] | str:
    """("v1"|"v2", {controller: parent directory for sandbox cgroups}) or why not."""
    own = _own_paths()
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        base = CGROUP_ROOT / own.get("", "/").lstrip("/")
        return _prepare_v2(base)
    parents: dict[str, Path] = {}
    for controller in ("memory", "pids", "freezer"):
        mount = CGROUP_ROOT / controller
        if not (mount / "cgroup.procs").exists():
            continue
        parent = mount / own.get(controller, "/").lstrip("/")
        if _writable_dir(parent):
            parents[controller] = parent
    if "pids" not in parents:
        return (
            "no writable cgroup: neither cgroup v2 at /sys/fs/cgroup nor a writable v1 "
            "pids hierarchy (run the host side as root, or in a delegated cgroup)"
        )
    _remove_stale(parents)
    return "v1", parents


def _prepare_v2(base: Path) -> tuple[str, dict[str, Path]] | str:
    """Make `base` able to hold sandbox cgroups with memory and pids controllers."""
    if not _writable_dir(base):
        return f"cgroup v2: our cgroup {base} is not writable (root or a delegated scope is needed)"
    wanted = {"memory", "pids"}
    available = set((base / "cgroup.controllers").read_text().split())
    if not wanted <= available:
        return (
            f"cgroup v2: controllers {sorted(wanted - available)} are not available in {base} "
            "(enable them in the parent's cgroup.subtree_control)"
        )
    enabled = set((base / "cgroup.subtree_control").read_text().split())
    if not wanted <= enabled:
        # v2 allows controllers in subtree_control only when the cgroup holds no
        # processes: move ours into a leaf first.
        leaf = base / "composer-leaf"
        try:
            leaf.mkdir(exist_ok=True)
            for pid in (base / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (leaf / "cgroup.procs").write_text(pid)
            (base / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as exc:
            return f"cgroup v2: cannot enable memory and pids controllers in {base}: {exc}"
    _remove_stale({"unified": base})
    return "v2", {"unified": base}


_live: set[SandboxCgroup] = set()


def _remove_live() -> None:
    for group in list(_live):
        with contextlib.suppress(Exception):
            group.remove()


atexit.register(_remove_live)


def _remove_stale(parents: dict[str, Path]) -> None:
    """Delete empty sandbox cgroups whose creating process is gone (a crash, a kill -9)."""
    for parent in parents.values():
        for path in parent.glob("composer-sbx-*"):
            creator = path.name.split("-")[2]
            if creator.isdigit() and not Path(f"/proc/{creator}").exists():
                with contextlib.suppress(OSError):
                    path.rmdir()  # fails while it still holds a process: left alone


def cgroup_unavailable() -> str | None:
    """None when sandboxes get their own cgroups here, else the reason."""
    layout = _layout()
    return layout if isinstance(layout, str) else None


class SandboxCgroup:
    """One sandbox's cgroup (one directory per hierarchy on v1)."""

    def __init__(self, version: str, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> SandboxCgroup | None:
        """A new cgroup with these totals; None (and a debug log) where cgroups are unavailable."""
        layout = _layout()
        if isinstance(layout, str):
            log.debug("sandbox without a cgroup: %s", layout)
            return None
        version, parents = layout
        name = f"composer-sbx-{os.getpid()}-{secrets.token_hex(6)}"
        dirs: dict[str, Path] = {}
        try:
            for controller, parent in parents.items():
                path = parent / name
                path.mkdir()
                dirs[controller] = path
            group = cls(version, dirs)
            group._limit(memory_bytes, processes)
            _live.add(group)
            return group
        except OSError:
            for path in dirs.values():
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise

    def _limit(self, memory_bytes: int, processes: int) -> None:
        if self.version == "v2":
            unified = self.dirs["unified"]
            (unified / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # absent without swap accounting
                (unified / "memory.swap.max").write_text("0")
            (unified / "pids.max").write_text(str(processes))
            return
        if "memory" in self.dirs:
            memory = self.dirs["memory"]
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        (self.dirs["pids"] / "pids.max").write_text(str(processes))

    @property
    def limits_memory(self) -> bool:
        return self.version == "v2" or "memory" in self.dirs

    def oom_kills(self) -> int | None:
        """How many processes the kernel's OOM killer has ended in this cgroup (v2
        `memory.events`, v1 `memory.oom_control`); None where the kernel does not say."""
        if self.version == "v2":
            path, key = self.dirs["unified"] / "memory.events", "oom_kill"
        elif "memory" in self.dirs:
            path, key = self.dirs["memory"] / "memory.oom_control", "oom_kill"
        else:
            return None
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            return None
        return None

    def enter_argv(self) -> list[str]:
        """Put in front of an argv: the command starts inside this cgroup (all hierarchies)."""
        return ["/bin/sh", "-c", ENTER_SCRIPT, "sh", *map(str, self.dirs.values()), "--"]

    def _procs_dir(self) -> Path:
        return self.dirs["unified"] if self.version == "v2" else self.dirs["pids"]

    def pids(self) -> list[int]:
        try:
            text = (self._procs_dir() / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def _freeze(self, frozen: bool) -> None:
        if self.version == "v2":
            with contextlib.suppress(OSError):
                (self.dirs["unified"] / "cgroup.freeze").write_text("1" if frozen else "0")
        elif "freezer" in self.dirs:
            with contextlib.suppress(OSError):
                (self.dirs["freezer"] / "freezer.state").write_text(
                    "FROZEN" if frozen else "THAWED"
                )

    def kill_all(self, limit: float = 10.0) -> bool:
        """SIGKILL every process in the cgroup until none is left; False if some outlived `limit`.

        Frozen first where the host can freeze, so a fork chain cannot stay ahead of
        the kills (a frozen process cannot fork; SIGKILL still ends it on thaw).
        """
        deadline = time.monotonic() + limit
        kill_file = self._procs_dir() / "cgroup.kill"
        while True:
            pids = self.pids()
            if not pids:
                return True
            if time.monotonic() > deadline:
                log.warning("cgroup %s still has processes %s", self._procs_dir(), pids[:10])
                return False
            if self.version == "v2" and kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
            else:
                self._freeze(True)
                for pid in self.pids():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                self._freeze(False)
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left and delete the cgroup directories."""
        _live.discard(self)
        self.kill_all()
        for path in self.dirs.values():
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # the last processes are still exiting
            else:
                log.warning("could not remove cgroup %s", path)
