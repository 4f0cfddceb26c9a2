"""The RL loop on its default runtime: the services as Ray actors on a local Ray instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _rl_helpers import tiny_checkpoint

from composer_rl.rl.config import load_config
from composer_rl.rl.run import run_rl


@pytest.mark.slow
def test_rl_on_ray_actors_trains_and_stamps_versions(tmp_path: Path) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    config = load_config(
        None,
        {
            "model": str(model),
            "run_dir": str(tmp_path / "run"),
            "tasks.per_template": 2,
            "rollout.max_turns": 2,
            "rollout.max_new_tokens": 24,
            "rollout.max_seq_len": 512,
            "loop.group_size": 2,
            "loop.groups_per_step": 1,
            "loop.drop_constant_groups": False,
            "loop.steps": 3,
            "eval.every": 2,
            "eval.during_per_template": 1,
        },
    )
    assert not config.local
    history = run_rl(config)
    assert [r["step"] for r in history] == [1, 2, 3]
    assert [r["version"] for r in history] == [1, 2, 3]
    # Every trained token was sampled by a version at most the trainer's before the step.
    for row in history:
        lags = {int(k): v for k, v in row["token_lag_hist"].items()}
        assert lags and min(lags) >= 0 and sum(lags.values()) == row["sampled_tokens"]
    run = tmp_path / "run"
    assert (run / "final" / "config.json").is_file()
    (evaluation,) = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert evaluation["version"] >= 2
