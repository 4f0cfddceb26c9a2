"""When the MTP module joins a phase: at its step, or earlier when the phase's time limit
would end it before that step; and a resumed phase keeps the join it already made."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from _services_support import micro_config, token_batch

from composer_model import ComposerModel
from composer_rl.stages.config import OptimConfig, PhaseConfig
from composer_rl.stages.loop import mtp_joins, train_phase
from composer_rl.stages.packing import pack_documents


def _phase(**fields: object) -> PhaseConfig:
    base: dict[str, object] = {
        "name": "pretrain",
        "steps": 600,
        "seq_len": 32,
        "optim": OptimConfig(warmup_steps=1),
    }
    return PhaseConfig.model_validate({**base, **fields})


def test_without_a_join_step_mtp_is_on_from_the_start() -> None:
    assert mtp_joins(_phase(), step=0, elapsed_s=0.0)


def test_joins_at_its_step_without_a_time_limit() -> None:
    phase = _phase(mtp_join_step=100)
    assert not mtp_joins(phase, step=99, elapsed_s=1e9)
    assert mtp_joins(phase, step=100, elapsed_s=0.0)


def test_a_time_limited_phase_joins_at_the_same_fraction_of_its_limit() -> None:
    # join at step 100 of 600 = 1/6 of the way; with a 330 s limit that is 55 s.
    phase = _phase(mtp_join_step=100, time_limit_s=330)
    assert not mtp_joins(phase, step=40, elapsed_s=54.9)
    assert mtp_joins(phase, step=40, elapsed_s=55.0)
    assert mtp_joins(phase, step=100, elapsed_s=1.0)


def test_a_join_step_past_the_end_keeps_mtp_off_even_with_a_time_limit() -> None:
    phase = _phase(steps=10, mtp_join_step=11, time_limit_s=5)
    assert not mtp_joins(phase, step=9, elapsed_s=1e9)


def test_a_join_made_by_the_time_limit_survives_a_resume(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    documents = token_batch(seed=0, rows=16, length=40)
    train = pack_documents(documents, 32, eos_id=0)
    model = ComposerModel(micro_config())
    run_dir = tmp_path / "phase"
    # A limit this short is past 5/6 of itself before the first step: MTP joins at step 0
    # (long before its join step, 5), and the phase stops after that step.
    cut = _phase(steps=6, mtp_join_step=5, time_limit_s=1e-6, rows_per_step=2, eval_rows=2)
    first = train_phase(model, cut, train, train, run_dir, show_progress=False)
    assert (first.steps_done, first.stopped_early, first.mtp_joined_at) == (1, True, 0)

    # Resumed without a limit, MTP stays on from where it joined: the join came back from
    # the checkpoint (the step rule alone would switch it off again until step 5).
    again = cut.model_copy(update={"time_limit_s": None})
    second = train_phase(model, again, train, train, run_dir, show_progress=False)
    assert (second.steps_done, second.mtp_joined_at) == (6, 0)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["mtp_on"] for r in records if r["kind"] == "train"] == [1] * 6
