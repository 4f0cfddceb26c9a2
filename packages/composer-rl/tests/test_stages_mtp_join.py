"""When the MTP module joins a phase: at its step, or earlier when the phase's time limit
would end it before that step; and a resumed phase keeps the join it already made."""

from __future__ import annotations

from composer_rl.stages.config import OptimConfig, PhaseConfig
from composer_rl.stages.loop import mtp_joins


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
