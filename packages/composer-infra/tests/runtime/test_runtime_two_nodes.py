"""The cluster path: a Ray head and a worker node started as separate processes on loopback.

`LocalCluster` runs each node as ``ray start --block`` in its own process group and
stops exactly those processes (``ray stop`` would kill every Ray process of this user).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from _runtime_services import TokenRolloutService, expected_token

from composer_infra.runtime import LocalCluster, RayRuntime, RuntimeConfig

HERE = Path(__file__).parent


@pytest.mark.slow
def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    """Start, join and stop a one-node cluster: every process it started is gone afterwards."""
    cluster = LocalCluster(worker_resources=[], log_dir=tmp_path, join_timeout_s=240)
    before = dict(os.environ)
    with cluster:
        assert cluster.address is not None
        head = cluster.processes[0]
        tree = _tree(head.pid)
        assert len(cluster.alive_nodes()) == 1 and tree  # gcs, raylet, ... below the head
        assert os.environ["RAY_AUTH_MODE"] == "token"  # a driver here agrees with the nodes
        RayRuntime(RuntimeConfig(address=cluster.address)).start()  # left connected
        assert len(RayRuntime.alive_nodes()) == 1
    assert not ray.is_initialized()  # stop() disconnected the driver before the nodes went
    assert head.returncode is not None
    survivors = {pid: _cmdline(pid) for pid, started in tree.items() if _running(pid, started)}
    assert not survivors, survivors
    assert cluster.processes == []
    assert os.environ.get("RAY_AUTH_MODE") == before.get("RAY_AUTH_MODE")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Ray workers inherit the raylet's environment: they must import the test services.
    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    with LocalCluster(
        head_resources={"head_node": 1},
        worker_resources=[{"worker_node": 1}],
        env={"PYTHONPATH": pythonpath},
        log_dir=tmp_path_factory.mktemp("ray-nodes"),
    ) as started:
        yield started  # stopping it also disconnects a driver a failed test left connected


@pytest.mark.slow
def test_services_run_across_a_head_and_a_worker_node(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    assert cluster.address is not None
    with RayRuntime(RuntimeConfig(address=cluster.address)) as runtime:
        nodes = {n["NodeID"]: n for n in runtime.alive_nodes()}
        assert len(nodes) == 2
        node_of = {
            resource: node_id
            for node_id, node in nodes.items()
            for resource in ("head_node", "worker_node")
            if resource in node["Resources"]
        }
        workers = [
            runtime.spawn(
                TokenRolloutService, name, str(tmp_path / "markers"), resources={resource: 0.1}
            )
            for name, resource in (("on-head", "head_node"), ("on-worker", "worker_node"))
        ]
        placed: list[dict[str, Any]] = ray.get([w.where.remote() for w in workers], timeout=180)
        # Each service landed on the node that advertises its resource.
        assert [p["node"] for p in placed] == [node_of["head_node"], node_of["worker_node"]]

        items = [(f"item-{i}", {"prompt": i, "length": 4}) for i in range(6)]
        refs = [workers[n % 2].rollout.remote(i, p) for n, (i, p) in enumerate(items)]
        results: dict[str, dict[str, Any]] = dict(
            zip((i for i, _ in items), ray.get(refs, timeout=180), strict=True)
        )
        for item_id, payload in items:
            assert results[item_id]["tokens"] == [
                expected_token(payload["prompt"], p) for p in range(4)
            ]
        assert {r["node"] for r in results.values()} == set(nodes)  # work ran on both nodes
    assert not ray.is_initialized()  # leaving the runtime disconnected; the cluster stays up
    assert len(cluster.alive_nodes()) == 2


@pytest.mark.slow
def test_a_driver_in_the_wrong_auth_mode_gets_a_clear_error(cluster: LocalCluster) -> None:
    """The draft's failure, made explicit: a token cluster refuses a driver in 'disabled' mode."""
    assert cluster.address is not None and cluster.auth == "token"
    code = (
        "import sys\n"
        "from composer_infra.runtime import ClusterAuthError, RayRuntime, RuntimeConfig\n"
        "try:\n"
        f"    RayRuntime(RuntimeConfig(address={cluster.address!r})).start()\n"
        "except ClusterAuthError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "RAY_AUTH_MODE=token" in done.stdout


def _tree(pid: int) -> dict[int, str]:
    """Every process below `pid`, with its start time (a recycled pid is another process)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            started = _started(child)
            if started is not None:
                found[child] = started
            stack.append(child)
    return found


def _started(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[19]


def _running(pid: int, started: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] != "Z" and fields[19] == started


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "(exited)"
