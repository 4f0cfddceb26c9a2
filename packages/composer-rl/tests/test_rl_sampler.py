"""The RL sampler: single epoch over the task mix, across restarts, with hard-kind upsampling."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer_rl.rl.sampler import TaskSampler, UpsamplingConfig, task_kind
from composer_rl.tasks import Category, Split, TaskMix, collect_tasks, sample_tasks


@pytest.fixture(scope="module")
def tasks():  # type: ignore[no-untyped-def]
    return sample_tasks(collect_tasks(Split.TRAIN), 20, seed=0)


def test_single_epoch_and_the_mix(tasks) -> None:  # type: ignore[no-untyped-def]
    sampler = TaskSampler(tasks, seed=3)
    drawn = []
    while (task := sampler.next()) is not None:
        drawn.append(task.id)
    assert sorted(drawn) == sorted(t.id for t in tasks)  # every task once, then None
    # Early draws follow the mix: feature iteration is the largest share by default.
    first = sampler.drawn[: len(tasks) // 3]
    shares = TaskSampler(tasks, seed=3)
    for _ in first:
        shares.next()
    realised = shares.realised_mix()
    assert max(realised, key=realised.get) == "mix/feature_iteration"


def test_resume_from_the_state_file_never_repeats(tmp_path: Path, tasks) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "sampler.json"
    first = TaskSampler(tasks, seed=1, state_path=state)
    a = [first.next().id for _ in range(10)]  # type: ignore[union-attr]
    again = TaskSampler(tasks, seed=1, state_path=state)  # a restarted run
    b = [again.next().id for _ in range(10)]  # type: ignore[union-attr]
    assert not set(a) & set(b)
    fresh = TaskSampler(tasks, seed=1)
    assert [fresh.next().id for _ in range(20)] == a + b  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="seed"):
        TaskSampler(tasks, seed=2, state_path=state)


def test_weights_choose_categories(tasks) -> None:  # type: ignore[no-untyped-def]
    only = TaskMix(weights={Category.DEBUGGING: 1.0})
    sampler = TaskSampler(tasks, seed=0, mix=only)
    drawn = []
    while (task := sampler.next()) is not None:
        drawn.append(task)
    assert drawn and {t.category for t in drawn} == {Category.DEBUGGING}
    with pytest.raises(ValueError, match="weight 0"):
        TaskSampler([t for t in tasks if t.category != Category.DEBUGGING], mix=only)


def test_hard_kinds_are_upsampled_without_reuse(tasks) -> None:  # type: ignore[no-untyped-def]
    feature = [t for t in tasks if t.category == Category.FEATURE_ITERATION]
    kinds = sorted({task_kind(t) for t in feature})
    assert len(kinds) >= 2
    hard = kinds[0]
    up = UpsamplingConfig(after_fraction=0.0, strength=20.0)
    sampler = TaskSampler(feature, seed=0, upsampling=up)
    for t in feature:
        sampler.record_effort(t, turns=8 if task_kind(t) == hard else 1, tokens=0)
    first = [sampler.next() for _ in range(5)]
    plain = TaskSampler(feature, seed=0)
    share_hard = sum(task_kind(t) == hard for t in first) / 5  # type: ignore[arg-type]
    share_plain = sum(task_kind(plain.next()) == hard for _ in range(5)) / 5  # type: ignore[arg-type]
    assert share_hard >= share_plain
    assert share_hard >= 0.8
    assert len({t.id for t in first}) == 5  # type: ignore[union-attr]


def test_upsampling_starts_at_a_share_of_the_planned_draws(tasks) -> None:  # type: ignore[no-untyped-def]
    """`upsample_hard_after` is a share of the run's draws, not of the whole epoch (a run
    of 40 steps draws ~100 of ~6,650 tasks: as a share of the epoch it never started)."""
    up = UpsamplingConfig(after_fraction=0.5, planned_draws=4)
    sampler = TaskSampler(tasks, seed=0, upsampling=up)
    sampler.record_effort(tasks[0], turns=3, tokens=0)
    assert sampler._weights([tasks[1].id]) is None
    sampler.next(), sampler.next()
    assert sampler._weights([tasks[1].id]) is not None
    epoch = TaskSampler(tasks, seed=0, upsampling=UpsamplingConfig(after_fraction=0.5))
    epoch.record_effort(tasks[0], turns=3, tokens=0)
    epoch.next(), epoch.next()
    assert epoch._weights([tasks[1].id]) is None


def test_learnability_favours_templates_near_half_and_survives_a_restart(
    tmp_path: Path,
    tasks,  # type: ignore[no-untyped-def]
) -> None:
    from composer_rl.rl.sampler import LearnabilityConfig, learnability_key

    debugging = [t for t in tasks if t.category == Category.DEBUGGING]
    keys = sorted({learnability_key(t) for t in debugging})
    assert len(keys) >= 2
    mixed, solved = keys[0], keys[1]
    only = TaskMix(weights={Category.DEBUGGING: 1.0})
    state = tmp_path / "sampler.json"
    sampler = TaskSampler(
        debugging, seed=0, mix=only, learnability=LearnabilityConfig(), state_path=state
    )
    by_key = {learnability_key(t): t for t in debugging}
    for i in range(40):  # one template half solved, another always solved
        sampler.record_outcome(by_key[mixed], solved=i % 2 == 0)
        sampler.record_outcome(by_key[solved], solved=True)
    assert sampler.learnability_weight(by_key[mixed]) == pytest.approx(1.0)
    assert sampler.learnability_weight(by_key[solved]) == pytest.approx(0.1)  # the floor
    drawn = [sampler.next() for _ in range(len(debugging) // 2)]
    share = sum(learnability_key(t) == mixed for t in drawn if t) / len(drawn)
    plain = TaskSampler(debugging, seed=0, mix=only)
    plain_drawn = [plain.next() for _ in range(len(debugging) // 2)]
    plain_share = sum(learnability_key(t) == mixed for t in plain_drawn if t) / len(plain_drawn)
    assert share > plain_share  # the half-solved template is drawn more than without weights
    assert len({t.id for t in drawn if t}) == len(drawn)  # never a prompt twice
    again = TaskSampler(
        debugging, seed=0, mix=only, learnability=LearnabilityConfig(), state_path=state
    )
    assert again.outcomes[mixed] == [20, 40] and again.outcomes[solved] == [40, 40]


def test_learnability_draws_a_category_that_never_solves_less(tasks) -> None:  # type: ignore[no-untyped-def]
    """The mix picks a category, learnability weighs it too: a category whose templates all
    failed every episode is drawn at about the floor's share, not at its mix weight."""
    from composer_rl.rl.sampler import LearnabilityConfig

    pair = [t for t in tasks if t.category in (Category.DEBUGGING, Category.REFACTOR)]
    even = TaskMix(weights={Category.DEBUGGING: 1.0, Category.REFACTOR: 1.0})

    def refactor_share(learnability: LearnabilityConfig | None) -> float:
        sampler = TaskSampler(pair, seed=0, mix=even, learnability=learnability)
        for t in pair:  # 40 failures per refactor task, of its template; debugging never played
            if t.category == Category.REFACTOR:
                for _ in range(40):
                    sampler.record_outcome(t, solved=False)
        drawn = [sampler.next() for _ in range(20)]
        return sum(t.category == Category.REFACTOR for t in drawn if t) / len(drawn)

    assert refactor_share(None) >= 0.3  # the mix alone: about half
    # floor 0.1 against 1.0 for an unplayed template (p = 1/2 from the prior): about 0.09
    assert refactor_share(LearnabilityConfig()) <= 0.2
