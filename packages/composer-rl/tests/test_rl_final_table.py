"""`composer-rl rl`'s closing comparison states what the baselines score on the same tasks.

A real (tiny) RL run through the command, then its held-out evaluation: the SFT and RL
policies and the do-nothing and random baselines on the same tasks (issue 31: a score
without its baselines misleads a reader who does not dig)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _rl_helpers import tiny_checkpoint

from composer_rl.cli import main

FLAGS = {
    "local": "true",
    "tasks.per-template": "1",
    "rollout.max-turns": "1",
    "rollout.max-new-tokens": "8",
    "rollout.max-seq-len": "512",
    "loop.steps": "1",
    "loop.group-size": "2",
    "loop.groups-per-step": "1",
    "eval.per-template": "1",
    "eval.pass-k-samples": "1",
}


@pytest.mark.slow
def test_the_final_table_carries_both_baselines(tmp_path: Path, capsys) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    run = tmp_path / "run"
    argv = ["rl", "--model", str(model), "--run-dir", str(run), "--no-progress"]
    argv += [x for k, v in FLAGS.items() for x in (f"--{k}", v)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "do-nothing" in printed and "random" in printed
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["baselines_pass1"]) == {"do_nothing", "random"}
    pass1 = next(r for r in summary["comparison"] if r["metric"] == "pass@1")
    assert set(pass1["baselines"]) == {"do_nothing", "random"}
    for mean, se in pass1["baselines"].values():
        assert 0.0 <= mean <= 1.0 and se >= 0.0
