"""The task mix: typed weights with clear errors, draws by weight, the realised mix."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from composer_rl.tasks import (
    DEFAULT_WEIGHTS,
    Category,
    Split,
    Task,
    TaskMix,
    collect_tasks,
    mix_metrics,
    realised_mix,
)


@pytest.fixture(scope="module")
def train() -> list[Task]:
    return collect_tasks(Split.TRAIN)


def test_default_mix_has_feature_iteration_largest() -> None:
    shares = TaskMix().shares()
    assert set(shares) == set(Category)
    assert max(shares, key=shares.__getitem__) == Category.FEATURE_ITERATION
    assert abs(sum(shares.values()) - 1) < 1e-9
    assert abs(sum(DEFAULT_WEIGHTS.values()) - 1) < 1e-9


def test_bad_weights_are_clear_errors() -> None:
    with pytest.raises(ValidationError, match="finite and >= 0"):
        TaskMix(weights={"debugging": -1})
    with pytest.raises(ValidationError, match="all zero"):
        TaskMix(weights={"debugging": 0})
    with pytest.raises(ValidationError, match="feature_iteration"):
        TaskMix.model_validate({"weights": {"feature-iteration": 1}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        TaskMix.model_validate({"weights": {"debugging": 1}, "wieghts": {}})


def test_draws_follow_the_weights(train: list[Task]) -> None:
    mix = TaskMix(weights={"feature_iteration": 3, "debugging": 1, "migration": 0})
    pools = mix.by_category(train)
    assert set(pools) == {Category.FEATURE_ITERATION, Category.DEBUGGING}
    drawn = mix.draw_many(random.Random(0), pools, 4000)
    shares = realised_mix(drawn)
    assert abs(shares["feature_iteration"] - 0.75) < 0.03
    assert abs(shares["debugging"] - 0.25) < 0.03
    assert shares["migration"] == 0
    # Same seed, same draws: the sampler's position is its RNG state.
    again = mix.draw_many(random.Random(0), pools, 50)
    assert [t.id for t in again] == [t.id for t in drawn[:50]]


def test_default_mix_realised_over_every_category(train: list[Task]) -> None:
    mix = TaskMix()
    pools = mix.training_tasks()
    assert set(pools) == set(Category)
    drawn = mix.draw_many(random.Random(1), pools, 3000)
    realised = realised_mix(drawn)
    for category, share in mix.shares().items():
        assert abs(realised[category.value] - share) < 0.03, category
    metrics = mix_metrics(drawn)
    assert metrics["mix/feature_iteration"] == realised["feature_iteration"]


def test_weight_on_a_category_without_tasks_is_named(train: list[Task]) -> None:
    mix = TaskMix(weights={"debugging": 1, "devops": 1})
    pools = mix.by_category([t for t in train if t.category == Category.DEBUGGING])
    with pytest.raises(ValueError, match=r"weight to \['devops'\].*set their weight to 0"):
        mix.check(pools)
