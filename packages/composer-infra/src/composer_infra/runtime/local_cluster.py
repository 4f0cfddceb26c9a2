"""A real multi-node Ray cluster on one machine: a head and worker nodes as separate processes.

Each node is a ``ray start --block`` process in its own session (process group), on
loopback, with custom resources that let a caller pin services to a node. This is what
tests and the ``composer-rl services check`` documentation use to exercise the cluster
path (joining by address, actors on another node's raylet, weights crossing processes)
without a second machine.

Stopping is exact: only the processes this object started, and the processes they
started (raylets, GCS, Ray workers, which Ray moves into their own process groups), are
signalled. ``ray stop`` is never used: it kills every Ray process of the user by name,
including other people's clusters on a shared box.

Authentication: Ray >= 2.52 may run a cluster with token authentication, and a node or
driver whose mode differs is refused with ``InvalidAuthToken``. Every node gets the same
``RAY_AUTH_MODE`` (the token itself is ``~/.ray/auth_token`` or ``RAY_AUTH_TOKEN``), and
while the cluster is up this process's environment carries that mode too, so a driver
started here (`RayRuntime`) or a child process (a CLI under test) agrees with the nodes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal, cast

import ray

from composer_infra.runtime.cluster import refresh_ray_auth_config

log = logging.getLogger(__name__)

AuthMode = Literal["token", "disabled"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_executable() -> str:
    """The `ray` script of this interpreter's environment (not whichever is first on PATH)."""
    candidate = Path(sys.executable).parent / "ray"
    if not candidate.exists():
        raise FileNotFoundError(
            f"no `ray` command next to {sys.executable}; install ray into this environment "
            "(it provides `ray start`, which LocalCluster runs for each node)"
        )
    return str(candidate)


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (Linux; psutil is not a dependency)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0], start time [19])."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def _descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, with its start time (so a recycled pid is never signalled)."""
    tree = _children()
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            fields = _stat(child)
            if fields is not None:
                found[child] = fields[19]
            stack.append(child)
    return found


def _alive(pid: int, started: str) -> bool:
    fields = _stat(pid)
    # A zombie has exited (its parent reaps it); another start time is another process.
    return fields is not None and fields[0] != "Z" and fields[19] == started


def _signal(processes: Mapping[int, str], group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
    for pid, started in processes.items():
        if _alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


class LocalCluster:
    """A Ray head plus ``len(worker_resources)`` worker nodes, started and stopped by us.

    ``with LocalCluster(worker_resources=[{"worker_node": 1}]) as cluster:`` then
    ``RayRuntime(RuntimeConfig(address=cluster.address))`` joins it. The head advertises
    `head_resources`, worker i advertises ``worker_resources[i]``; an actor spawned with
    ``resources={"worker_node": 0.01}`` lands on that worker. `start` returns once every
    node is registered and alive in the cluster's GCS, or raises with the node logs'
    tail. `env` adds variables to every node's environment: Ray workers inherit the
    raylet's environment, not the driver's, so ``PYTHONPATH`` for test-only modules or
    ``OMP_NUM_THREADS`` go here.
    """

    def __init__(
        self,
        *,
        head_resources: Mapping[str, float] | None = None,
        worker_resources: Sequence[Mapping[str, float]] = ({"worker_node": 1},),
        num_cpus: int = 1,
        object_store_memory: int = 100_000_000,
        env: Mapping[str, str] | None = None,
        auth: AuthMode = "token",
        log_dir: str | Path | None = None,
        join_timeout_s: float = 180.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        if num_cpus < 1:
            raise ValueError(f"num_cpus must be >= 1 per node, got {num_cpus}")
        if auth not in ("token", "disabled"):
            raise ValueError(f"auth must be 'token' or 'disabled', got {auth!r}")
        self.head_resources = dict(head_resources or {"head_node": 1})
        self.worker_resources = [dict(r) for r in worker_resources]
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.extra_env = dict(env or {})
        self.auth: AuthMode = auth
        self.join_timeout_s = join_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._log_dir_arg = Path(log_dir) if log_dir is not None else None
        self.log_dir: Path | None = None
        self.address: str | None = None
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        self._log_paths: list[Path] = []
        self._saved_env: dict[str, str | None] = {}
        # Each node's process tree as first seen once it joined: a daemon whose parent
        # died since is no longer below the node at stop time, and must still be stopped.
        self._started_trees: dict[int, dict[int, str]] = {}

    @property
    def num_nodes(self) -> int:
        return 1 + len(self.worker_resources)

    @property
    def driver_env(self) -> dict[str, str]:
        """Variables a driver process needs to join this cluster (set here while it runs)."""
        return {"RAY_AUTH_MODE": self.auth, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        if self.processes:
            raise RuntimeError("this LocalCluster is already started; stop() it first")
        ray_cmd = _ray_executable()
        if self.auth == "token" and not self._token_available():
            # Created once, before any node starts, so the nodes never race to write it.
            subprocess.run(
                [ray_cmd, "get-auth-token", "--generate"], check=True, capture_output=True
            )
        self.log_dir = self._log_dir_arg or Path(tempfile.mkdtemp(prefix="composer-ray-cluster-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._apply_driver_env()
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        node_env = {**os.environ, **self.driver_env, **self.extra_env}
        common = [
            f"--num-cpus={self.num_cpus}",
            f"--object-store-memory={self.object_store_memory}",
            "--node-ip-address=127.0.0.1",
            "--disable-usage-stats",
            "--block",
        ]
        commands = [
            [
                ray_cmd,
                "start",
                "--head",
                f"--port={port}",
                "--include-dashboard=false",
                f"--resources={json.dumps(self.head_resources)}",
                *common,
            ]
        ]
        commands += [
            [
                ray_cmd,
                "start",
                f"--address={self.address}",
                f"--resources={json.dumps(resources)}",
                *common,
            ]
            for resources in self.worker_resources
        ]
        try:
            for i, command in enumerate(commands):
                path = self.log_dir / ("head.log" if i == 0 else f"worker-{i}.log")
                log_file = path.open("wb")
                self._logs.append(log_file)
                self._log_paths.append(path)
                # Workers retry until the head's GCS answers, so all start at once.
                self.processes.append(
                    subprocess.Popen(
                        command,
                        env=node_env,
                        stdout=log_file,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self.wait_for_nodes()
            self._started_trees = {p.pid: _descendants(p.pid) for p in self.processes}
        except BaseException:
            self.stop()
            raise
        return self

    def _token_available(self) -> bool:
        if os.environ.get("RAY_AUTH_TOKEN"):
            return True
        path = os.environ.get("RAY_AUTH_TOKEN_PATH")
        return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()

    def _apply_driver_env(self) -> None:
        for key, value in self.driver_env.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        refresh_ray_auth_config()

    def _restore_driver_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()

    def alive_nodes(self) -> list[dict[str, Any]]:
        """The nodes the cluster's GCS reports alive: ``{"node_id", "resources"}`` each.

        Asked through a GCS client, not a driver, so it works before and without
        ``ray.init`` in this process.
        """
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        if self.address is None:
            raise RuntimeError("the cluster is not started")
        infos = GcsClient(address=self.address).get_all_node_info(timeout=10)
        return [
            {"node_id": node_id.hex(), "resources": dict(info.resources_total)}
            for node_id, info in infos.items()
            if info.state == 0  # GcsNodeInfo.ALIVE
        ]

    def wait_for_nodes(self) -> list[dict[str, Any]]:
        """Block until every node we started is alive in the GCS; the nodes."""
        deadline = time.monotonic() + self.join_timeout_s
        last_error: Exception | None = None
        while True:
            for proc, path in zip(self.processes, self._log_paths, strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"Ray node `{' '.join(map(str, cast(list[str], proc.args)))}` exited with code "
                        f"{proc.returncode} before the cluster was up; its log ({path}):\n"
                        + self._tail(path)
                    )
            try:
                nodes = self.alive_nodes()
            except Exception as error:  # the head's GCS is still starting
                last_error, nodes = error, []
            if len(nodes) >= self.num_nodes:
                return nodes
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(nodes)} of {self.num_nodes} Ray nodes joined {self.address} within "
                    f"{self.join_timeout_s:.0f}s (last GCS error: {last_error!r}); raise "
                    f"join_timeout_s on a loaded machine. Head log:\n{self._tail(self._log_paths[0])}"
                )
            time.sleep(0.5)

    @staticmethod
    def _tail(path: Path, lines: int = 30) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return f"(unreadable: {error})"

    def stop(self) -> None:
        """Stop the nodes we started (workers first), then restore this process's environment.

        A driver in this process still connected to the cluster is disconnected first (it
        would otherwise wait on a dead GCS). SIGTERM lets each node shut its daemons down;
        whatever is left after `stop_timeout_s` gets SIGKILL (the GCS and the autoscaler
        monitor of a head often ignore SIGTERM for 30 s and more; a throwaway cluster has
        nothing to save, so the default grace is short). Safe to call twice.
        """
        if ray.is_initialized() and self.address is not None:
            port = self.address.rsplit(":", 1)[-1]
            if str(ray.get_runtime_context().gcs_address).rsplit(":", 1)[-1] == port:
                ray.shutdown()
        try:
            for proc in reversed(self.processes):
                self._stop_node(proc)
        finally:
            for log_file in self._logs:
                log_file.close()
            self.processes, self._logs, self._started_trees = [], [], {}
            self._restore_driver_env()
            refresh_ray_auth_config()

    def _stop_node(self, proc: subprocess.Popen[bytes]) -> None:
        # Ray workers and some daemons put themselves in their own process groups, so the
        # node's group alone misses them: signal its whole process tree, as seen at start
        # and now (start times guard against a recycled pid).
        tree = {**self._started_trees.get(proc.pid, {}), **_descendants(proc.pid)}
        _signal(tree, proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline and (
            proc.poll() is None or any(_alive(p, t) for p, t in tree.items())
        ):
            time.sleep(0.2)
        tree.update(_descendants(proc.pid))
        _signal(tree, proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        # SIGKILL is delivered, not done: a process with a large address space takes a
        # moment to exit, and stop() promises that nothing it started is running after it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p, t) for p, t in tree.items()):
            time.sleep(0.05)
        if proc.returncode is None:
            log.warning("Ray node process %d did not exit after SIGKILL", proc.pid)
        for pid, started in tree.items():
            if _alive(pid, started):
                log.warning("process %d of Ray node %d did not exit after SIGKILL", pid, proc.pid)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["AuthMode", "LocalCluster"]
