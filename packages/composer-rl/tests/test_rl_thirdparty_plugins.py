"""A real ``composer-rl rl`` run uses a third-party package's task source and sandbox backend
(issue 32, item 3): the package is installed (found through its entry point in group
``composer``), the run trains only on its tasks (``tasks.builtin = false``) in sandboxes of
its backend (``sandbox = "recording"``), its reward scores every episode, and every plugin
kind comes from one manager built once: composer-infra's standalone manager is unusable for
the whole run, so a lookup anywhere else would fail the run or be recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _rl_helpers import tiny_checkpoint
from thirdparty_support import (
    BACKEND,
    ENTRY_POINT,
    REWARD,
    TRAIN_IDS,
    thirdparty,  # noqa: F401  (a fixture)
    watch_job,
)

from composer_infra.sandbox.backends.bwrap import BwrapBackend
from composer_rl.cli import main

FLAGS = {
    "local": "true",
    "tasks.builtin": "false",
    "sandbox": BACKEND,
    "rollout.max-turns": "1",
    "rollout.max-new-tokens": "8",
    "rollout.max-seq-len": "512",
    "loop.steps": "1",
    "loop.group-size": "2",
    "loop.groups-per-step": "1",
    "loop.drop-constant-groups": "false",
    "eval.per-template": "0",
    "eval.every": "0",
}


@pytest.mark.slow
@pytest.mark.usefixtures("thirdparty")
def test_rl_run_draws_the_plugin_task_in_the_plugin_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if BwrapBackend().unavailable_reason():
        pytest.skip(f"bwrap cannot run here: {BwrapBackend().unavailable_reason()}")
    model = tiny_checkpoint(tmp_path / "sft")  # stage one's oracles: not part of the job
    run, log = tmp_path / "run", tmp_path / "sandboxes.log"
    config = tmp_path / "rl.toml"
    config.write_text(
        f'[plugins]\nblock = ["style"]\n\n[plugin_config.thirdparty]\nlog = "{log}"\n'
    )
    argv = ["rl", "--config", str(config), "--model", str(model), "--run-dir", str(run)]
    argv += ["--no-progress", *(x for k, v in FLAGS.items() for x in (f"--{k}", v))]

    watch = watch_job(monkeypatch)
    assert main(argv) == 0

    episodes = [
        json.loads(x) for x in (run / "episodes" / "episodes.jsonl").read_text().splitlines()
    ]
    assert len(episodes) >= 2
    assert {e["task"] for e in episodes} <= set(TRAIN_IDS)  # only the package's tasks
    assert all(e["stop_reason"] != "sandbox_error" and e["reward"] is not None for e in episodes)
    assert all(REWARD in e["components"] for e in episodes)  # its reward scored each one
    started = log.read_text().splitlines()
    assert len(started) >= len(episodes)  # every sandbox the episodes ran in was its backend's
    row = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert ENTRY_POINT in row["plugins_registered"]

    assert len(watch.builds) == 1, watch.builds  # one manager for the whole command
    assert watch.standalone_uses == []
