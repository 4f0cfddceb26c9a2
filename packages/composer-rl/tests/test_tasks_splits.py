"""The held-out split never meets a training parameter choice, nor a training name; both
splits cover every template and category; and the validation split is carved from the
training split alone."""

from __future__ import annotations

from collections import Counter

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Category, Split, Task, collect_tasks, split_of
from composer_rl.tasks.templates.base import VALIDATION_EVERY, is_validation, params_key
from composer_rl.tasks.templates.vocab import MODULES, name_split, names


@pytest.fixture(scope="module")
def train() -> list[Task]:
    return collect_tasks(Split.TRAIN)


@pytest.fixture(scope="module")
def heldout() -> list[Task]:
    return collect_tasks(Split.HELDOUT)


def test_splits_are_disjoint_in_parameters_and_content(
    train: list[Task], heldout: list[Task]
) -> None:
    key = lambda t: params_key(t.metadata["template"], t.metadata["params"])  # noqa: E731
    assert not {key(t) for t in train} & {key(t) for t in heldout}
    assert not {t.id for t in train} & {t.id for t in heldout}
    content = lambda t: (t.instruction, tuple(sorted(t.files.items())))  # noqa: E731
    assert not {content(t) for t in train} & {content(t) for t in heldout}


def _name_values(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for item in value for v in _name_values(item)]
    return []


def test_heldout_never_meets_a_training_name() -> None:
    """Every name a held-out task takes as a parameter is one no training task takes, and
    each name's split is the vocabulary's (`name_split`)."""
    seen: dict[Split, set[str]] = {split: set() for split in Split}
    for template in BUILTIN_TEMPLATES:
        for params in template.parameter_space():
            split = template.split(params)
            values = {v for k in template.name_params for v in _name_values(params.get(k))}
            assert {name_split(v) for v in values} <= {split}, (template.name, params)
            seen[split] |= values
    assert seen[Split.TRAIN] and seen[Split.HELDOUT]
    assert not seen[Split.TRAIN] & seen[Split.HELDOUT]


def test_every_parameter_choice_lands_in_exactly_one_split() -> None:
    for template in BUILTIN_TEMPLATES:
        space = template.parameter_space()
        keys = [params_key(template.name, p) for p in space]
        assert len(set(keys)) == len(keys), template.name
        n_train = sum(1 for _ in template.tasks(Split.TRAIN))
        n_heldout = sum(1 for _ in template.tasks(Split.HELDOUT))
        assert n_train + n_heldout == len(space)
        assert n_train > 0 and n_heldout > 0, template.name


def test_split_assignment_follows_the_names() -> None:
    train_module, train_other = names(MODULES, Split.TRAIN)[:2]
    (heldout_module,) = names(MODULES, Split.HELDOUT)[:1]
    params = {"module": train_module, "function": "ignored", "ops": ["+", "-"]}
    named = ("module",)
    assert split_of("fix_operator", params, named) == Split.TRAIN
    assert split_of("fix_operator", dict(reversed(params.items())), named) == Split.TRAIN
    assert split_of("fix_operator", {**params, "module": heldout_module}, named) == Split.HELDOUT
    # names in a list count too, and two splits in one choice are refused
    assert split_of("t", {"modules": [train_module, train_other]}, ("modules",)) == Split.TRAIN
    with pytest.raises(ValueError, match="both splits"):
        split_of("t", {"modules": [train_module, heldout_module]}, ("modules",))


def test_split_without_names_is_a_stable_hash() -> None:
    params = {"module": "scores", "function": "mix", "ops": ["+", "-"]}
    assert split_of("fix_operator", params) == split_of(
        "fix_operator", dict(reversed(params.items()))
    )


def test_heldout_covers_every_category_and_difficulty(heldout: list[Task]) -> None:
    assert {t.category for t in heldout} == set(Category)
    assert {t.difficulty for t in heldout} == {1, 2, 3}
    # The tiny model needs tasks it can solve: most templates are difficulty 1.
    assert sum(t.difficulty == 1 for t in heldout) > len(heldout) / 3


def test_validation_is_a_fifth_of_train_and_never_heldout(
    train: list[Task], heldout: list[Task]
) -> None:
    share = sum(map(is_validation, train)) / len(train)
    assert abs(share - 1 / VALIDATION_EVERY) < 0.02, share
    assert not [t.id for t in heldout if is_validation(t)]
    # carved from every template, not from a few
    per_template = Counter(t.metadata["template"] for t in train if is_validation(t))
    assert set(per_template) == {t.name for t in BUILTIN_TEMPLATES}
    # by id alone: a copy of a task with other metadata is still (not) a validation task
    task = next(t for t in train if is_validation(t))
    assert is_validation(task.model_copy(update={"instruction": "other"}))
    assert not is_validation(task.model_copy(update={"metadata": {"split": "heldout"}}))
