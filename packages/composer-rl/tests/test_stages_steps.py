"""Stage one is defined by steps: no phase stops at a wall-clock limit unless asked to."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from _services_support import micro_config, token_batch

from composer_model import ComposerModel
from composer_rl.cli import build_parser
from composer_rl.cli._stage_args import stage1_config
from composer_rl.stages.config import OptimConfig, PhaseConfig, Stage1Config
from composer_rl.stages.loop import train_phase
from composer_rl.stages.packing import pack_documents


def test_the_default_phases_have_no_time_limit() -> None:
    config = Stage1Config()
    for phase in (config.pretrain, config.long_context, config.sft):
        assert phase.time_limit_s is None, phase.name
    # MTP joins the base phase at a step, not at a fraction of a clock.
    assert config.pretrain.mtp_join_step == config.pretrain.steps // 2


def test_a_time_limit_is_an_explicit_opt_in_on_the_command_line(tmp_path: Path) -> None:
    parser = build_parser()
    plain = stage1_config(parser.parse_args(["pretrain", "--run-dir", str(tmp_path)]))
    assert plain.pretrain.time_limit_s is None
    limited = stage1_config(
        parser.parse_args(["pretrain", "--run-dir", str(tmp_path), "--pretrain.time-limit-s", "90"])
    )
    assert limited.pretrain.time_limit_s == 90.0


def test_a_phase_without_a_limit_runs_every_step_and_joins_mtp_at_its_step(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    train = pack_documents(token_batch(seed=0, rows=8, length=40), 32, eos_id=0)
    model = ComposerModel(micro_config())
    phase = PhaseConfig(
        name="slow",
        steps=4,
        seq_len=32,
        rows_per_step=1,
        eval_every=10,
        eval_rows=1,
        checkpoint_every=10,
        mtp_join_step=2,
        optim=OptimConfig(warmup_steps=1),
    )
    checkpoints: list[int] = []
    result = train_phase(
        model, phase, train, train, tmp_path, on_checkpoint=checkpoints.append, show_progress=False
    )
    assert checkpoints == [4]
    assert (result.steps_done, result.stopped_early, result.mtp_joined_at) == (4, False, 2)
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["mtp_on"] for r in records if r["kind"] == "train"] == [0, 0, 1, 1]
