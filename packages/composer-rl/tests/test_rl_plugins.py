"""The example third-party reward plugin and a running RL job: added mid-run it scores from
the next step boundary (the run records when), it survives a kill -9 of the job, and removed
mid-run it stops scoring."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _rl_helpers import tiny_checkpoint

from composer_rl.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_SRC = ROOT / "examples" / "reward-plugin" / "src"
SPEC = "composer_example_reward:TestsTouchedReward"
Row = dict[str, Any]


def _rows(path: Path) -> list[Row]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


class RLJob:
    """`composer-rl rl` in its own process group, services in threads (`--local true`)."""

    def __init__(self, model: Path, run: Path, steps: int, log: Path) -> None:
        flags = {
            "model": str(model), "run-dir": str(run), "local": "true", "loop.steps": str(steps),
            "tasks.per-template": "3", "rollout.max-turns": "2", "rollout.max-new-tokens": "24",
            "rollout.max-seq-len": "512", "loop.group-size": "2", "loop.groups-per-step": "1",
            "loop.drop-constant-groups": "false", "eval.per-template": "0",
            "train.checkpoint-every": "1",
        }  # fmt: skip
        code = "import sys; from composer_rl.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", code, "rl", "--no-progress"]
        argv += [x for k, v in flags.items() for x in (f"--{k}", v)]
        env = {**os.environ, "PYTHONPATH": str(EXAMPLE_SRC)}
        self.log = log
        with log.open("a") as out:
            self.process = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float = 900) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            assert self.process.poll() is None, (
                f"job ended before {what}: " + self.log.read_text()[-3000:]
            )
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.mark.slow
def test_example_plugin_added_survives_kill_9_and_is_removed_mid_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    run = tmp_path / "run"
    metrics = run / "metrics.jsonl"
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))  # the CLI checks the spec here too

    def registered(row: Row) -> bool:
        return "late" in row["plugins_registered"]

    job = RLJob(model, run, steps=40, log=tmp_path / "job.log")
    try:
        job.wait_for("the first step", lambda: bool(_rows(metrics)))
        assert main(["plugins", "add", "--run", str(run), "--name", "late", SPEC]) == 0
        job.wait_for("the plugin to be added", lambda: any(registered(r) for r in _rows(metrics)))
        added_at = min(r["step"] for r in _rows(metrics) if registered(r))
        job.wait_for(
            "a checkpoint after the add", lambda: _rows(metrics)[-1]["step"] >= added_at + 1
        )
    finally:
        job.kill()  # kill -9 of the whole job while the plugin is registered
    before_kill = len(_rows(metrics))

    job = RLJob(model, run, steps=40, log=tmp_path / "job.log")
    try:
        job.wait_for("a step after the restart", lambda: len(_rows(metrics)) > before_kill)
        assert registered(_rows(metrics)[before_kill]), "the run-time plugin was lost by the kill"
        assert main(["plugins", "remove", "--run", str(run), "late"]) == 0
        job.wait_for(
            "the plugin to be removed",
            lambda: any(not registered(r) for r in _rows(metrics)[before_kill:]),
        )
        removed_at = min(r["step"] for r in _rows(metrics)[before_kill:] if not registered(r))
        job.wait_for(
            "two steps after the removal", lambda: _rows(metrics)[-1]["step"] >= removed_at + 2
        )
    finally:
        job.kill()
    rows = _rows(metrics)
    assert next(r["step"] for r in rows if r.get("plugins/add/late") == 1.0) == added_at
    assert [r["step"] for r in rows if r.get("plugins/remove/late") == 1.0] == [removed_at]
    episodes = [e for e in _rows(run / "episodes" / "episodes.jsonl") if e["reward"] is not None]
    scored_with = [e for e in episodes if "tests_touched" in e["components"]]
    assert scored_with, "the added plugin never scored an episode"
    assert all(added_at <= e["scored_after_step"] for e in scored_with)
    assert not any(
        e["scored_after_step"] >= removed_at and "tests_touched" in e["components"]
        for e in episodes[-4:]
    )
