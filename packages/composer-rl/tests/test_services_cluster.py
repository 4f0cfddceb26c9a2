"""The services across a real two-node Ray cluster on this machine, and `composer-rl services check`.

The cluster is a head and a worker node started as separate ``ray start`` processes on
loopback (`composer_infra.runtime.LocalCluster`), in Ray's token-authentication mode.
In the round, inference and evaluation are pinned to the head, training and environments
(the sandboxes' node, ``sandbox_node``) to the worker, so a round really crosses processes
and nodes both ways: weights go through the ``file://`` store from the worker's trainer to
the head's inference engine, and the episodes that engine drives make their tool calls,
grading and sandboxes in the worker's environment service.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from _services_support import AGENT_CALL, AGENT_VOCAB, micro_agent, micro_config, token_batch

from composer_infra.runtime import LocalCluster
from composer_infra.sandbox import default_registry
from composer_infra.sandbox import sandbox as sandbox_module
from composer_infra.store import WeightSubscriber, open_store
from composer_model import OptimConfig
from composer_rl.agent.episode import EpisodeResult, RunnerConfig
from composer_rl.agent.sandboxes import sandbox_task
from composer_rl.cli import build_parser
from composer_rl.cli._ray_args import RAY_ADDRESS_ENV
from composer_rl.cli.services import parse_placement
from composer_rl.errors import ConfigError
from composer_rl.rl.services import (
    EnvironmentConfig,
    ServiceSandboxes,
    TrainingConfig,
    start_services,
)
from composer_rl.tasks import BuiltinTaskSource, Split

BWRAP_MISSING = default_registry().backends()["bwrap"].unavailable_reason()
BACKEND = "process" if BWRAP_MISSING else "bwrap"
COMPOSER_RL = str(Path(sys.executable).parent / "composer-rl")
ON_HEAD = {"head_node": 0.01}
ON_WORKER = {"worker_node": 0.01}
ON_SANDBOX_NODE = {"sandbox_node": 0.01}


# -- the command line, without Ray -------------------------------------------------------


def test_ray_address_flag_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    assert build_parser().parse_args(["services", "check"]).ray_address is None
    monkeypatch.setenv(RAY_ADDRESS_ENV, "127.0.0.2:6379")
    args = build_parser().parse_args(["services", "check"])
    assert args.ray_address == "127.0.0.2:6379"
    args = build_parser().parse_args(["services", "check", "--ray-address", "127.0.0.1:7000"])
    assert args.ray_address == "127.0.0.1:7000"


def test_placement_flags_and_their_errors() -> None:
    assert parse_placement(["training=head_node", "inference=gpu:0.5", "inference=fast"]) == {
        "training": {"head_node": 0.01},
        "inference": {"gpu": 0.5, "fast": 0.01},
    }
    for bad, says in (
        ("trainer=head_node", "SERVICE one of"),
        ("training", "SERVICE=RESOURCE"),
        ("training=head_node:lots", "must be a number"),
        ("training=head_node:0", "must be > 0"),
    ):
        with pytest.raises(ConfigError, match=says):
            parse_placement([bad])


def test_unknown_service_in_placement_fails_before_ray_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown service"):
        start_services(micro_config(), tmp_path, placement={"trainer": {"CPU": 1}})
    assert not ray.is_initialized()


# -- a local Ray instance (no address) ---------------------------------------------------


@pytest.mark.slow
def test_cli_check_starts_and_stops_a_local_ray_instance(tmp_path: Path) -> None:
    report = run_check(tmp_path, [])
    assert report["address"] is None and len(report["nodes"]) == 1
    assert {s["node_id"] for s in report["services"].values()} == set(report["nodes"])


# -- two nodes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        head_resources={"head_node": 1},
        worker_resources=[{"worker_node": 1, "sandbox_node": 1}],
        env={"OMP_NUM_THREADS": "1"},  # the actors' processes inherit the node's environment
        log_dir=tmp_path_factory.mktemp("ray-nodes"),
    ) as started:
        yield started  # stopping it also disconnects a driver a failed test left connected


def node_with(resource: str) -> str:
    (node,) = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and resource in n["Resources"]]
    return str(node)


@pytest.mark.slow
def test_a_round_crosses_two_nodes(cluster: LocalCluster, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    run_dir = tmp_path / "run"
    tasks = [t for _, t in zip(range(2), BuiltinTaskSource().tasks(Split.TRAIN), strict=False)]
    agent = micro_agent(tmp_path / "agent", tasks)  # calls `list_files` every turn
    services = start_services(
        agent,
        run_dir,
        address=cluster.address,
        training=TrainingConfig(
            optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=0),
            checkpoint_every=0,
            threads=1,
        ),
        environment=EnvironmentConfig(
            backend=BACKEND, warm_sandboxes=0, work_dir=tmp_path / "sandboxes"
        ),
        threads=1,
        placement={
            "training": ON_WORKER,
            "evaluation": ON_HEAD,
            "inference": ON_HEAD,
            "environment": ON_SANDBOX_NODE,
        },
    )
    try:
        assert services.owns_runtime and len(services.runtime.alive_nodes()) == 2
        head, worker = node_with("head_node"), node_with("sandbox_node")
        assert head != worker
        where = {name: place["node_id"] for name, place in services.locations().items()}
        assert where == {
            "training": worker,
            "inference-0": head,
            "environment": worker,
            "evaluation": head,
        }

        # Episodes on the head's engine: every tool call, the grading and the sandboxes
        # themselves are the worker's environment service's; the engine's process never made
        # a sandbox (the first would have made its process's sandbox directory).
        trainer, inference, env = services.training, services.inference[0], services.environment
        assert ray.get(inference.sync.remote()) == 0
        runner = RunnerConfig(max_turns=2, max_new_tokens=8, backend=BACKEND)
        ray.get(inference.start_rollouts.remote(str(agent / "tokenizer.json"), runner))
        for i, task in enumerate(tasks):
            ray.get(inference.submit_episodes.remote(task, 1, f"group-{i}"))
        episodes: list[EpisodeResult] = []
        while len(episodes) < len(tasks):
            episodes += [r for _, r in ray.get(inference.poll_episodes.remote())]
        for episode in episodes:
            assert episode.grading_error is None and episode.report is not None
            assert [c.name for c in episode.calls] == [AGENT_CALL.strip()] * 2
            assert all(c.ok for c in episode.calls)
            assert set(episode.task.files) <= set(episode.calls[0].output.split())
            assert episode.files_after == episode.task.files  # read back beside the sandbox
        stats = ray.get(env.stats.remote())
        assert (stats["opened"], stats["closed"], stats["calls"]) == (2, 2, 4)
        assert stats["open"] == [] and stats["work_dir"] == str(tmp_path / "sandboxes")
        assert ray.get(inference.__ray_call__.remote(lambda _: sandbox_module._work_root)) is None

        # Fork, snapshot and restore through the same handles, the sandbox on the worker.
        sandboxes = ServiceSandboxes(env)
        first = sandboxes.open(tasks[0], BACKEND)
        assert first.call("write_file", {"path": "note.txt", "content": "kept"}).ok
        copy = first.fork()
        restored = sandboxes.restore(copy.snapshot())
        assert restored.call("read_file", {"path": "note.txt"}).output == "kept"
        homes = ray.get(
            env.__ray_call__.remote(lambda s: [s.sandbox(i).home for i in s.open_sandboxes])
        )
        assert len(homes) == 3 and all(h.parent == tmp_path / "sandboxes" for h in homes)
        for handle in (first, copy, restored):
            handle.close()
        assert ray.get(env.stats.remote())["open"] == []

        step = ray.get(trainer.train_step.remote(token_batch(seed=0), wait=True))
        assert step.version == 1 and math.isfinite(step.stats.loss)
        # Version 1 is complete in the run directory's file:// store, seen from here too.
        assert services.store_url == (run_dir / "weights").resolve().as_uri()
        subscriber = WeightSubscriber(open_store(services.store_url), readers=1)
        try:
            assert subscriber.latest_version() == 1
        finally:
            subscriber.close()

        # The head's engine applies the worker's weights; every new token says so.
        assert ray.get(inference.sync.remote()) == 1
        generated = ray.get(
            inference.generate.remote([[3, 4, 5], [9, 9]], max_new_tokens=5, seed=0)
        )
        for result in generated:
            assert result.token_ids and result.versions == [1] * len(result.token_ids)
            assert all(0 <= t < AGENT_VOCAB for t in result.token_ids)
            assert all(math.isfinite(lp) and lp <= 0 for lp in result.logprobs)

        # The worker node's environment service grades a built-in task in a sandbox: the
        # oracle solution passes its hidden tests, the untouched repository does not.
        task = tasks[0]
        assert grade(services.environment, task, task.solved_files()).all_passed
        assert not grade(services.environment, task, task.files).all_passed

        report = ray.get(services.evaluation.evaluate.remote(token_batch(seed=42, rows=2)))
        assert report["version"] == 1 and math.isfinite(report["loss"]) and report["loss"] > 0
    finally:
        services.stop()
    assert not ray.is_initialized()
    assert len(cluster.alive_nodes()) == 2  # a joined cluster outlives the services


def grade(environment: Any, task: Any, files: dict[str, str]) -> Any:
    spec = sandbox_task(task, files)
    sandbox_id = ray.get(environment.open.remote(spec))
    try:
        # The hidden tests go in as the grader writes them (with the probe and its runner).
        return ray.get(environment.run_tests.remote(sandbox_id, task.tests))
    finally:
        ray.get(environment.close.remote(sandbox_id))


@pytest.mark.slow
def test_placement_nobody_offers_is_an_error(cluster: LocalCluster, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no live Ray node offers 1 of resource 'gpu_box'"):
        start_services(
            micro_config(),
            tmp_path,
            address=cluster.address,
            placement={"training": {"gpu_box": 1}},
        )
    assert not ray.is_initialized()  # the runtime it started for this is stopped again


@pytest.mark.slow
def test_cli_check_joins_the_cluster_and_reports_both_nodes(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    assert cluster.address is not None
    places = ["training=head_node", "evaluation=head_node"]
    places += ["inference=worker_node", "environment=worker_node"]
    report = run_check(
        tmp_path,
        ["--ray-address", cluster.address, *(f"--place={p}" for p in places)],
    )
    assert report["address"] == cluster.address and len(report["nodes"]) == 2
    nodes = {name: s["node_id"] for name, s in report["services"].items()}
    assert set(nodes.values()) == set(report["nodes"])
    assert nodes["training"] == nodes["evaluation"] != nodes["inference-0"] == nodes["environment"]
    assert len(cluster.alive_nodes()) == 2  # the command left the cluster it joined running


def run_check(tmp_path: Path, extra: list[str]) -> dict[str, Any]:
    """`composer-rl services check` as a subprocess on the micro model; its JSON report."""
    config_file = tmp_path / "micro-config.json"
    config_file.write_text(json.dumps(micro_config().to_hf_dict()))
    report_file = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != RAY_ADDRESS_ENV}
    env["OMP_NUM_THREADS"] = "1"
    command = [COMPOSER_RL, "services", "check", "--model", str(config_file)]
    command += ["--backend", BACKEND, "--threads", "1", "--report", str(report_file), *extra]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "services check passed" in done.stdout
    report: dict[str, Any] = json.loads(report_file.read_text())
    assert report["ok"] and set(report["services"]) == {
        "training",
        "inference-0",
        "environment",
        "evaluation",
    }
    for service in report["services"].values():
        assert service["seconds"] >= 0 and service["summary"]
    assert report["services"]["inference-0"]["version"] == 1
    assert report["services"]["evaluation"]["version"] == 1
    assert f"{len(report['nodes'])} node(s) alive" in done.stdout
    return report
