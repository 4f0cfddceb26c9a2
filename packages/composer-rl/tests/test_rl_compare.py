"""The learning claim's arithmetic: paired margins, the seed spread and the verdicts."""

from __future__ import annotations

import math
import statistics

import pytest

from composer_rl.eval.scores import PolicyScores
from composer_rl.rl.compare import comparison_rows, paired_margin, seed_margins
from composer_rl.rl.config import load_config


def _scores(name: str, greedy: list[float], sampled: list[float] | None = None) -> PolicyScores:
    ids = [f"t{i}" for i in range(len(greedy))]
    scores = PolicyScores(
        name=name, checkpoint=name, per_task_pass1=dict(zip(ids, greedy, strict=True))
    )
    if sampled is not None:
        scores.per_task_sampled_pass1 = dict(zip(ids, sampled, strict=True))
        scores.per_task_passk = {t: float(v > 0) for t, v in zip(ids, sampled, strict=True)}
        scores.k = 4
    scores.by_difficulty = {1: (0.5, 0.1, len(ids))}
    scores.reward_mean, scores.tokens_per_episode = 0.25, 120.0
    return scores


def test_paired_margin_is_the_mean_difference_over_common_tasks_with_its_error() -> None:
    a = {"x": 0.0, "y": 1.0, "z": 0.0, "only_a": 1.0}
    b = {"x": 1.0, "y": 1.0, "z": 1.0, "only_b": 0.0}
    mean, se, n = paired_margin(a, b)
    assert n == 3
    assert mean == pytest.approx(2 / 3)
    assert se == pytest.approx(statistics.stdev([1.0, 0.0, 1.0]) / math.sqrt(3))


def test_seed_margins_passes_a_clear_gain_and_fails_one_inside_the_seed_spread() -> None:
    sft = _scores("sft", [0.0] * 10 + [1.0] * 10)
    # Every seed solves four more of the twenty tasks: margin 0.2, seeds identical.
    clear = {s: _scores(f"rl{s}", [0.0] * 6 + [1.0] * 14) for s in range(3)}
    row = seed_margins(sft, clear)["pass@1 (greedy)"]
    assert row["margin_mean"] == pytest.approx(0.2)
    assert row["seed_spread"] == pytest.approx(0.0)
    assert row["beats_spread"]
    # The paired error: differences are four 1s and sixteen 0s.
    expected_se = statistics.stdev([1.0] * 4 + [0.0] * 16) / math.sqrt(20)
    assert row["margin_se"] == pytest.approx(expected_se)
    assert row["se_below_third"] == (expected_se < 0.2 / 3)
    # Seeds that scatter around SFT: a mean margin smaller than the spread fails.
    scattered = {
        0: _scores("a", [0.0] * 4 + [1.0] * 16),
        1: _scores("b", [0.0] * 15 + [1.0] * 5),
        2: _scores("c", [0.0] * 10 + [1.0] * 10),
    }
    row = seed_margins(sft, scattered)["pass@1 (greedy)"]
    assert row["margin_mean"] == pytest.approx((0.3 - 0.25 + 0.0) / 3)
    assert row["seed_spread"] == pytest.approx(statistics.stdev([0.8, 0.25, 0.5]))
    assert not row["beats_spread"]
    assert not row["se_below_third"]


def test_seed_margins_covers_sampled_rates_only_when_scored() -> None:
    sft = _scores("sft", [0.0, 1.0], sampled=[0.25, 0.5])
    rl = {0: _scores("rl", [1.0, 1.0], sampled=[0.5, 1.0])}
    summary = seed_margins(sft, rl)
    assert set(summary) == {"pass@1 (greedy)", "pass@1 (T=1)", "pass@k (T=1)"}
    assert summary["pass@1 (T=1)"]["margin_mean"] == pytest.approx(0.375)
    assert math.isnan(summary["pass@1 (T=1)"]["seed_spread"])  # one seed: no spread
    assert not summary["pass@1 (T=1)"]["beats_spread"]
    greedy_only = seed_margins(_scores("sft", [0.0, 1.0]), {0: _scores("rl", [1.0, 1.0])})
    assert set(greedy_only) == {"pass@1 (greedy)"}


def test_policy_scores_survive_a_json_round_trip() -> None:
    original = _scores("rl", [0.0, 1.0, 1.0], sampled=[0.25, 0.75, 1.0])
    import json

    restored = PolicyScores.from_json(json.loads(json.dumps(original.to_json())))
    assert restored == original
    rows = comparison_rows(_scores("sft", [0.0, 0.0, 1.0], sampled=[0, 0.25, 1.0]), restored)
    assert [r["metric"] for r in rows][:3] == ["pass@1", "pass@1 (T=1, 4 samples)", "pass@4"]


def test_the_default_comparison_is_large_enough_and_samples_for_pass_at_k() -> None:
    config = load_config()
    assert config.eval.per_template >= 10  # 21 templates: ~200 held-out tasks
    assert config.eval.pass_k_samples > 1
    assert config.eval.k_per_template <= config.eval.per_template
