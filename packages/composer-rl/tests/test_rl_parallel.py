"""`composer-rl rl` with a parallel trainer: flags, the local-mode refusal, the rank-group
endpoint, and (slow) real runs whose trainer is two Ray rank actors (dp=2 or cp=2, ep=2)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
from _rl_helpers import tiny_checkpoint

from composer_model import load_pretrained
from composer_rl.rl.config import add_config_flags, config_from_args, load_config
from composer_rl.rl.run import _rank_zero, run_rl, trainer_config


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    return parser.parse_args(list(argv))


def test_short_and_long_flags_set_the_train_dims() -> None:
    config = config_from_args(_parse("--dp", "2", "--train.cp", "2", "--train.parallel.ep", "4"))
    parallel = config.train.parallel
    assert (parallel.dp, parallel.cp, parallel.ep, parallel.cp_mode) == (2, 2, 4, "allgather")
    assert config.train.ranks == 4
    assert trainer_config(config).parallel == parallel  # the section is the service's config
    assert trainer_config(load_config()).parallel.world_size == 1


def test_local_mode_refuses_a_parallel_trainer(tmp_path: Path) -> None:
    config = load_config(None, {"local": True, "train.dp": 2, "run_dir": str(tmp_path / "run")})
    with pytest.raises(ValueError, match="run on Ray"):
        run_rl(config)
    assert not (tmp_path / "run").exists()  # refused before anything was started


def test_a_step_too_small_for_dp_is_refused(tmp_path: Path) -> None:
    config = load_config(
        None,
        {
            "train.dp": 8,
            "loop.group_size": 2,
            "loop.groups_per_step": 2,
            "run_dir": str(tmp_path / "run"),
        },
    )
    with pytest.raises(ValueError, match=r"cannot feed --train\.parallel\.dp 8"):
        run_rl(config)


def test_rank_zero_future_waits_for_every_rank_and_fails_on_any() -> None:
    ranks: list[Future[str]] = [Future(), Future()]
    out = _rank_zero(ranks)
    ranks[0].set_result("rank 0")
    assert not out.done()  # rank 1 still running its share of the step
    ranks[1].set_result("rank 1")
    assert out.result(timeout=1) == "rank 0"

    ranks = [Future(), Future()]
    out = _rank_zero(ranks)
    ranks[1].set_exception(RuntimeError("rank 1 died"))
    with pytest.raises(RuntimeError, match="rank 1 died"):
        out.result(timeout=1)
    ranks[0].set_result("late")  # a rank finishing after the failure changes nothing
    assert isinstance(out.exception(), RuntimeError)


@pytest.mark.slow
# The Ray wiring is the same for every dims (one rank actor a rank); the cp=2 RL step's
# exactness is test_services_parallel's. One case keeps CI's time (each run is ~2 min).
@pytest.mark.parametrize("dims", [("--dp", "2")], ids=["dp2-ep2"])
def test_rl_command_with_a_parallel_trainer_on_ray(tmp_path: Path, dims: tuple[str, str]) -> None:
    model = tiny_checkpoint(tmp_path / "sft")
    run = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "composer_rl.cli",
        "rl",
        "--no-progress",
        "--model",
        str(model),
        "--run-dir",
        str(run),
        *dims,
        "--ep",
        "2",
        "--train.optim.lr",
        "1e-3",
        "--train.checkpoint-every",
        "1",
        "--tasks.per-template",
        "2",
        "--rollout.max-turns",
        "2",
        "--rollout.max-new-tokens",
        "24",
        "--rollout.max-seq-len",
        "512",
        "--loop.group-size",
        "2",
        "--loop.groups-per-step",
        "2",
        "--loop.drop-constant-groups",
        "false",
        "--loop.steps",
        "2",
        "--eval.per-template",
        "0",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("COMPOSER_RAY_ADDRESS", None)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["version"] for r in rows] == [1, 2]
    assert all(r["sampled_tokens"] > 0 and torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    assert f"{dims[0][2:]} = 2" in (run / "config.toml").read_text()
    # Every rank checkpointed its own state (its expert shard) at both steps.
    ranks = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ranks == ["rank-000", "rank-001"]
    # The final policy is the whole model (experts gathered), loadable by one process,
    # and trained: it differs from the SFT checkpoint the run started from.
    final = load_pretrained(run / "final")
    start = load_pretrained(model)
    moved = [
        name
        for name, value in final.state_dict().items()
        if not torch.equal(value, start.state_dict()[name])
    ]
    assert any(".experts." in name for name in moved), moved[:5]
    ids = torch.randint(1, final.config.vocab_size, (1, 12))
    assert torch.isfinite(final(ids).logits).all()
    assert (run / "final" / "tokenizer.json").is_file()
    # The same command with one more step resumes every rank from its own checkpoint.
    steps = command.index("--loop.steps") + 1
    command[steps] = "3"
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["version"] > 2  # restored weights went out under an unused number first
    for rank in ranks:  # and each rank wrote its step-3 checkpoint after the resume
        assert list((run / "checkpoints" / rank).glob("step-00000003-*")), rank
