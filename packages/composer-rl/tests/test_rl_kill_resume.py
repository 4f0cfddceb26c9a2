"""kill -9 of a whole RL run: nothing finished is lost, no prompt is trained twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _rl_helpers import tiny_checkpoint

from composer_infra.checkpoint import GroupStore, StepCheckpointer
from composer_rl.rl.config import load_config
from composer_rl.rl.run import run_rl

FLAGS = {
    "local": "true",
    "tasks.per-template": "3",
    "rollout.max-turns": "2",
    "rollout.max-new-tokens": "24",
    "rollout.max-seq-len": "512",
    "loop.group-size": "2",
    "loop.groups-per-step": "1",
    "loop.max-groups-in-flight": "3",
    "loop.drop-constant-groups": "false",
    # Groups finished before the kill may be several versions old when the resumed run reaches
    # them; dropping them as stale is the lag rule working (unit-tested in test_rl_algorithm),
    # but it would make "every finished group is trained after resume" depend on timing.
    "loop.max-off-policy-steps": "1000",
    "train.checkpoint-every": "2",
    "eval.per-template": "0",
}


def _task_of(group_id: str) -> str:
    return group_id.split("-", 1)[1]


@pytest.mark.slow
def test_kill_9_then_resume_trains_every_finished_group_once(tmp_path: Path) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    run = tmp_path / "run"
    argv = [sys.executable, "-c", "import sys; from composer_rl.cli import main; sys.exit(main())"]
    argv += [
        "rl",
        "--model",
        str(model),
        "--run-dir",
        str(run),
        "--loop.steps",
        "40",
        "--no-progress",
    ]
    argv += [x for k, v in FLAGS.items() for x in (f"--{k}", v)]
    job = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if job.poll() is not None:
            pytest.fail(
                f"the job ended early: {job.stderr.read().decode()[-2000:] if job.stderr else ''}"
            )
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
            break
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    checkpoint = StepCheckpointer(run / "checkpoints").latest()
    assert checkpoint is not None
    at_kill = json.loads((checkpoint / "state.json").read_text())
    consumed_at_checkpoint = set(at_kill["sampler"]["consumed"])
    groups_at_kill = set(GroupStore(run / "groups").ids())
    drawn_at_kill = json.loads((run / "sampler.json").read_text())["drawn"]
    # Finished groups no checkpoint trained on: they must be trained (or counted) after resume.
    untrained = groups_at_kill - consumed_at_checkpoint - set(at_kill["sampler"]["dropped"])
    assert untrained, "the kill should leave finished groups that no checkpoint trained on"

    # Resumed groups are queued first and one group is trained a step, so this many steps
    # train every one of them.
    steps = at_kill["step"] + len(untrained) + 1
    overrides = {k.replace("-", "_"): v for k, v in FLAGS.items()}
    config = load_config(
        None, {**overrides, "model": str(model), "run_dir": str(run), "loop.steps": steps}
    )
    history = run_rl(config)
    assert history[0]["step"] == at_kill["step"] + 1
    assert history[0]["count_groups_resumed"] >= 1
    final = json.loads((StepCheckpointer(run / "checkpoints").latest() / "state.json").read_text())
    consumed = set(final["sampler"]["consumed"])
    dropped = set(final["sampler"]["dropped"])
    # Nothing generated before the kill was lost: every such group was trained after resume.
    assert untrained <= consumed, (
        f"finished before the kill but not trained after it: {sorted(untrained - consumed)} "
        f"(dropped: {sorted(untrained & dropped)})"
    )
    # Single epoch: no task trained twice, no task drawn twice.
    tasks = [_task_of(g) for g in consumed]
    assert len(tasks) == len(set(tasks))
    drawn = json.loads((run / "sampler.json").read_text())["drawn"]
    assert drawn[: len(drawn_at_kill)] == drawn_at_kill and len(drawn) == len(set(drawn))
    # A finished group is never regenerated: every group id names a distinct task.
    all_groups = GroupStore(run / "groups").ids()
    assert len({_task_of(g) for g in all_groups}) == len(all_groups)
