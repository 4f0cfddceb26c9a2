"""The held-out split never meets a training parameter choice, and both splits cover every
template and category."""

from __future__ import annotations

from composer_rl.tasks import BUILTIN_TEMPLATES, Category, Split, collect_tasks, split_of
from composer_rl.tasks.templates.base import params_key


def test_splits_are_disjoint_in_parameters_and_content() -> None:
    train = collect_tasks(Split.TRAIN)
    heldout = collect_tasks(Split.HELDOUT)
    key = lambda t: params_key(t.metadata["template"], t.metadata["params"])  # noqa: E731
    assert not {key(t) for t in train} & {key(t) for t in heldout}
    assert not {t.id for t in train} & {t.id for t in heldout}
    content = lambda t: (t.instruction, tuple(sorted(t.files.items())))  # noqa: E731
    assert not {content(t) for t in train} & {content(t) for t in heldout}


def test_every_parameter_choice_lands_in_exactly_one_split() -> None:
    for template in BUILTIN_TEMPLATES:
        space = template.parameter_space()
        keys = [params_key(template.name, p) for p in space]
        assert len(set(keys)) == len(keys), template.name
        n_train = sum(1 for _ in template.tasks(Split.TRAIN))
        n_heldout = sum(1 for _ in template.tasks(Split.HELDOUT))
        assert n_train + n_heldout == len(space)
        assert n_train > 0 and n_heldout > 0, template.name


def test_split_assignment_is_deterministic() -> None:
    params = {"module": "scores", "function": "mix", "ops": ["+", "-"]}
    assert split_of("fix_operator", params) == split_of(
        "fix_operator", dict(reversed(params.items()))
    )


def test_heldout_covers_every_category_and_difficulty() -> None:
    heldout = collect_tasks(Split.HELDOUT)
    assert {t.category for t in heldout} == set(Category)
    assert {t.difficulty for t in heldout} == {1, 2, 3}
    # The tiny model needs tasks it can solve: most templates are difficulty 1.
    assert sum(t.difficulty == 1 for t in heldout) > len(heldout) / 3
