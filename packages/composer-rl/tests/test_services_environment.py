"""Episodes' sandboxes through the environment service (called in this process here; the
Ray tests put the service on an actor, on another node in test_services_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import torch
from _services_support import micro_agent

from composer_infra.environment import EnvironmentConfig
from composer_infra.sandbox import default_registry
from composer_model import ComposerTokenizer, InferenceEngine, load_pretrained
from composer_rl.agent.episode import EpisodeRunner, RunnerConfig
from composer_rl.rl.services import JobEnvironmentService, ServiceSandboxes
from composer_rl.rl.services.environment import ServiceSandbox
from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task

BWRAP_MISSING = default_registry().backends()["bwrap"].unavailable_reason()
BACKEND = "process" if BWRAP_MISSING else "bwrap"


def _tasks(n: int) -> list[Task]:
    return [t for _, t in zip(range(n), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]


def _config(tmp_path: Path, name: str) -> EnvironmentConfig:
    """A service of its own work directory; every service of a test shares one snapshot store."""
    return EnvironmentConfig(
        backend=BACKEND,
        warm_sandboxes=0,
        work_dir=tmp_path / name,
        store_dir=tmp_path / "snapshots",
    )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[JobEnvironmentService]:
    with JobEnvironmentService(_config(tmp_path, "env-a")) as env:
        yield env


def test_fork_snapshot_and_migration_through_handles(
    service: JobEnvironmentService, tmp_path: Path
) -> None:
    (task,) = _tasks(1)
    sandboxes = ServiceSandboxes(service)
    first = sandboxes.open(task)
    assert first.call("write_file", {"path": "note.txt", "content": "one"}).ok
    fork = first.fork()
    assert fork.call("write_file", {"path": "note.txt", "content": "two"}).ok
    assert first.call("read_file", {"path": "note.txt"}).output == "one"
    snapshot = fork.snapshot()
    # Another service sharing the snapshot store (another node's) takes the episode over.
    with JobEnvironmentService(_config(tmp_path, "env-b")) as second:
        moved = ServiceSandboxes(second).restore(snapshot)
        assert moved.call("read_file", {"path": "note.txt"}).output == "two"
        report, files = moved.grade(task)
        assert not report.all_passed and files["note.txt"] == "two"
        moved.close()
        assert second.stats()["open"] == []
    for handle in (first, fork):
        handle.close()
    stats = service.stats()
    assert (stats["opened"], stats["closed"], stats["calls"], stats["open"]) == (2, 2, 3, [])
    gone = first.call("read_file", {"path": "note.txt"})  # an error result, never a raise
    assert not gone.ok and "no open sandbox" in (gone.error or "")


def test_episodes_run_their_tool_calls_in_the_service(
    service: JobEnvironmentService, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    tasks = _tasks(2)
    checkpoint = micro_agent(tmp_path / "agent", tasks)
    tokenizer = ComposerTokenizer.from_file(checkpoint / "tokenizer.json")
    engine = InferenceEngine(load_pretrained(checkpoint), tokenizer, max_batch_size=4)
    config = RunnerConfig(max_turns=2, max_new_tokens=8, backend=BACKEND)
    runner = EpisodeRunner(engine, tokenizer, config, None, ServiceSandboxes(service))
    try:
        results = runner.run(tasks)
    finally:
        runner.close()
    for result in results:
        assert result.stop_reason == "max_turns" and result.grading_error is None
        assert [c.name for c in result.calls] == ["list_files"] * 2
        assert all(c.ok for c in result.calls)
        assert set(result.task.files) <= set(result.calls[0].output.split())
        assert result.report is not None and not result.solved
        assert result.files_after == result.task.files
    stats = service.stats()
    assert (stats["opened"], stats["closed"], stats["calls"], stats["open"]) == (2, 2, 4, [])


class _LostService:
    """A service whose calls fail as Ray reports a lost actor, or with a bug of ours."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def call(self, *args: object) -> None:
        raise self.error


def test_a_lost_service_is_a_failed_tool_call_and_a_bug_still_raises() -> None:
    lost = ServiceSandbox(_LostService(ray.exceptions.RayActorError()), "sb-1")
    answer = lost.call("list_files", {})
    assert not answer.ok and "environment service error: RayActorError" in (answer.error or "")
    buggy = ServiceSandbox(_LostService(TypeError("ours")), "sb-1")
    with pytest.raises(TypeError, match="ours"):
        buggy.call("list_files", {})
