"""The asynchronous RL loop end to end on a tiny random policy (services in threads, real
engine, real bwrap sandboxes, real plugins, real weight store and checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _rl_helpers import tiny_checkpoint

from composer_infra.checkpoint import GroupStore
from composer_rl.rl.config import load_config
from composer_rl.rl.fates import FATES_LOG, FateBook
from composer_rl.rl.run import run_rl


def _config(tmp_path: Path, **loop: object):  # type: ignore[no-untyped-def]
    model = tiny_checkpoint(tmp_path / "sft")
    overrides = {
        "model": str(model),
        "run_dir": str(tmp_path / "run"),
        "local": True,
        "tasks.per_template": 2,
        "rollout.max_turns": 2,
        "rollout.max_new_tokens": 24,
        "rollout.max_seq_len": 512,
        "rollout.max_batch_size": 8,
        "loop.group_size": 2,
        "loop.groups_per_step": 1,
        "loop.max_groups_in_flight": 2,
        "loop.drop_constant_groups": False,
        "train.checkpoint_every": 1,
        "train.optim.lr": 1e-3,
        **{f"loop.{k}": v for k, v in loop.items()},
    }
    return load_config(None, overrides)


def test_async_loop_trains_publishes_and_logs(tmp_path: Path) -> None:
    config = _config(tmp_path, steps=3)
    config = config.model_copy(
        update={"eval": config.eval.model_copy(update={"every": 2, "during_per_template": 1})}
    )
    history = run_rl(config)
    assert [row["step"] for row in history] == [1, 2, 3]
    for row in history:
        assert row["sampled_tokens"] > 0
        assert row["version"] == row["step"]
        assert 0.0 <= row["is_capped_share"] <= 1.0
        assert row["logprob_mismatch"] >= 0.0
        assert "kl_k1" in row and "kl_k3" in row
    run = tmp_path / "run"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    episodes = [
        json.loads(x) for x in (run / "episodes" / "episodes.jsonl").read_text().splitlines()
    ]
    assert episodes and all("components" in e and "versions" in e for e in episodes)
    assert (run / "final" / "tokenizer.json").is_file()
    assert (run / "config.toml").is_file()
    # Every trained group is in the group store, and each prompt was drawn once.
    sampler = json.loads((run / "sampler.json").read_text())
    assert len(sampler["drawn"]) == len(set(sampler["drawn"]))
    assert len(GroupStore(run / "groups").ids()) >= 3
    # Every finished group's fate is recorded: the three trained at the steps that trained
    # them, the rest still queued when loop.steps was reached (left over).
    fates = FateBook.read(run / FATES_LOG)
    assert set(fates.standing) == set(GroupStore(run / "groups").ids()) and not fates.repeated
    trained = {g: row["step"] for row in history for g in row["trained_groups"]}
    assert {g: r["step"] for g, r in fates.standing.items() if r["fate"] == "trained"} == trained
    assert {r["fate"] for g, r in fates.standing.items() if g not in trained} <= {"left_over"}
    # The evaluation service scored version 2 on held-out tasks beside training.
    (evaluation,) = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert evaluation["version"] >= 2 and evaluation["tasks"] >= 13
    assert 0.0 <= evaluation["pass@1"] <= 1.0


@pytest.mark.slow
def test_resume_trains_on_without_repeating_a_prompt(tmp_path: Path) -> None:
    config = _config(tmp_path, steps=2)
    run_rl(config)
    run = tmp_path / "run"
    first = json.loads((run / "sampler.json").read_text())["drawn"]
    more = config.model_copy(update={"loop": config.loop.model_copy(update={"steps": 4})})
    history = run_rl(more)
    assert [row["step"] for row in history] == [3, 4]
    drawn = json.loads((run / "sampler.json").read_text())["drawn"]
    assert drawn[: len(first)] == first
    assert len(drawn) == len(set(drawn))
    # The extension's restart line voided the groups left over at step 2, decided again
    # since: every finished group has one fate standing, trained ones at steps 1-4.
    fates = FateBook.read(run / FATES_LOG)
    (restart,) = fates.restarts
    assert restart["from_step"] == 2 and restart["life"] == 1
    assert set(fates.standing) == set(GroupStore(run / "groups").ids()) and not fates.repeated
    steps = sorted(r["step"] for r in fates.standing.values() if r["fate"] == "trained")
    assert steps == [1, 2, 3, 4]


@pytest.mark.slow
def test_sync_mode_is_the_same_loop_alternating(tmp_path: Path) -> None:
    config = _config(tmp_path, steps=2, sync=True)
    history = run_rl(config)
    assert [row["step"] for row in history] == [1, 2]
    # Alternating: every token of a trained batch was sampled by the version just before it.
    assert all(row["token_lag_max"] == 0 for row in history)


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    from composer_rl.rl.config import ConfigError

    with pytest.raises(ConfigError, match=r"loop\.group_size"):
        load_config(None, {"loop.group_size": 1})
    with pytest.raises(ConfigError, match=r"unknown key 'loop\.groups'"):
        load_config(None, {"loop.groups": 3})
    with pytest.raises(ConfigError, match=r"train\.publish_dtype.*'float32' or 'bfloat16'"):
        load_config(None, {"train.publish_dtype": "int8"})


def test_publish_dtype_reaches_the_trainer() -> None:
    from composer_rl.rl.run import trainer_config

    assert trainer_config(load_config(None, {})).publish_dtype is None
    config = load_config(None, {"train.publish_dtype": "bfloat16"})
    assert trainer_config(config).publish_dtype == "bfloat16"


def test_the_written_config_reads_back_to_the_same_config(tmp_path: Path) -> None:
    """`config.toml` in a run directory is a config file: lists and tables included."""
    from composer_rl.rl.config import to_toml

    config = load_config(
        None,
        {
            "plugins.block": ["style", "communication"],
            "rewards.length.k": 0.0,
            "rewards.length.weight": 8.6e-5,
            "plugin_config.example_reward": {"bonus": 0.25, "name": 'a "quoted" word'},
            "loop.steps": 7,
            "rollout.compile_decode": True,
        },
    )
    written = tmp_path / "config.toml"
    written.write_text(to_toml(config))
    assert load_config(written) == config
