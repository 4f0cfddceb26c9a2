"""The cluster path: a Ray head and a worker node started as separate processes on loopback.

`ray start --block` runs each node in the foreground of its own process group, so the
fixture can stop exactly the processes it started (``ray stop`` would kill every Ray
process of this user on the machine, by name).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from _runtime_services import TokenRolloutService, expected_token

from composer_infra.runtime import RayRuntime, RuntimeConfig, SlotReconciler

HERE = Path(__file__).parent
RAY = str(Path(sys.executable).parent / "ray")
NODE_ARGS = [
    "--num-cpus=1",
    "--object-store-memory=100000000",
    "--node-ip-address=127.0.0.1",
    "--disable-usage-stats",
    "--block",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            if sig == signal.SIGTERM:
                # The node's daemons share the group; make sure none outlive it.
                time.sleep(1)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            return


@pytest.fixture
def two_node_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # Ray >= 2.5x enables token authentication by default, with the token in
    # ~/.ray/auth_token, created by whichever process starts first. Make sure it exists
    # before anything starts and put the head, the worker and this driver in token mode,
    # so nobody races to create it or falls back to "disabled" while the head starts.
    if not (Path.home() / ".ray" / "auth_token").exists():
        subprocess.run([RAY, "get-auth-token", "--generate"], check=True, capture_output=True)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    }
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = [open(tmp_path / name, "wb") for name in ("head.log", "worker.log")]  # noqa: SIM115
    try:
        head = [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            f"--resources={json.dumps({'head_node': 1})}",
            *NODE_ARGS,
        ]
        procs.append(
            subprocess.Popen(
                head, env=env, stdout=logs[0], stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        worker = [
            RAY,
            "start",
            f"--address={address}",
            f"--resources={json.dumps({'worker_node': 1})}",
            *NODE_ARGS,
        ]
        # The worker retries until the head's GCS answers.
        procs.append(
            subprocess.Popen(
                worker, env=env, stdout=logs[1], stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc in reversed(procs):
            _stop_group(proc)
        for log in logs:
            log.close()


@pytest.mark.slow
def test_services_run_across_a_head_and_a_worker_node(
    two_node_cluster: str, tmp_path: Path
) -> None:
    runtime = RayRuntime(RuntimeConfig(address=two_node_cluster))
    deadline = time.monotonic() + 180
    while True:  # the head may still be starting
        try:
            runtime.start()
            break
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    while len(runtime.alive_nodes()) < 2:
        assert time.monotonic() < deadline, f"worker node never joined: {ray.nodes()}"
        time.sleep(1)
    node_ids = {n["NodeID"] for n in runtime.alive_nodes()}
    assert len(node_ids) == 2

    workers = [
        runtime.spawn(
            TokenRolloutService,
            name,
            str(tmp_path / "rollouts"),
            str(tmp_path / "markers"),
            resources={resource: 0.1},
        )
        for name, resource in (("on-head", "head_node"), ("on-worker", "worker_node"))
    ]
    placed = ray.get([w.where.remote() for w in workers], timeout=180)
    assert {p["node"] for p in placed} == node_ids  # one service on each node

    items = [(f"item-{i}", {"prompt": i, "length": 4}) for i in range(6)]
    results: dict[str, dict[str, Any]] = {}
    SlotReconciler(workers, method="rollout", slots=2).run(
        items, lambda i, r: results.__setitem__(i, r)
    )
    assert sorted(results) == sorted(i for i, _ in items)
    for item_id, payload in items:
        assert results[item_id]["tokens"] == [
            expected_token(payload["prompt"], p) for p in range(4)
        ]
    assert {r["node"] for r in results.values()} == node_ids  # work ran on both nodes
    runtime.stop()
