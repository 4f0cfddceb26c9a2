"""Minimal pairs (issue #29): training tasks with the same repository whose instructions
differ only in the word that decides the answer, so that no policy does well on them
without reading the instruction.

A pair's members share `metadata["pair"]`; they have identical files (visible tests
included), instructions one word apart, and hidden tests that tell every member's answer
from every other's. Pairs live in the training split only; the held-out split meets each
paired template's names with one deciding word, as any other task.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, Template, grade_files
from composer_rl.tasks.templates import PAIR_KEY


def _paired_templates() -> list[Template]:
    """The templates whose training tasks come in pairs (found from their tasks, not from
    a list, so that a new paired template is checked too)."""
    found = []
    for template in BUILTIN_TEMPLATES:
        space = [p for p in template.parameter_space() if template.split(p) == Split.TRAIN]
        if any(PAIR_KEY in template.build(p).metadata for p in space[:20]):
            found.append(template)
    return found


PAIRED = _paired_templates()


def _groups(template: Template) -> dict[str, list[Task]]:
    groups: dict[str, list[Task]] = defaultdict(list)
    for task in template.tasks(Split.TRAIN):
        assert PAIR_KEY in task.metadata, f"{task.id}: a training task of a paired template"
        groups[task.metadata[PAIR_KEY]].append(task)
    return groups


def _one_word_apart(a: str, b: str) -> bool:
    left, right = a.split(), b.split()
    return len(left) == len(right) and sum(x != y for x, y in zip(left, right, strict=True)) == 1


def test_the_paired_templates_follow_the_templates_before_them() -> None:
    """The pairs were appended after the 21 templates before them (which kept their
    places); templates added since come after the pairs."""
    names = [t.name for t in PAIRED]
    assert {"pick_item", "keep_items"} <= set(names)
    assert [t.name for t in BUILTIN_TEMPLATES[21 : 21 + len(PAIRED)]] == names
    assert all(t.difficulty == 1 for t in PAIRED)


@pytest.mark.parametrize("template", PAIRED, ids=lambda t: t.name)
def test_pairs_share_files_and_differ_in_one_word(template: Template) -> None:
    groups = _groups(template)
    assert len(groups) >= 50, f"{template.name}: only {len(groups)} pairs"
    for pair, members in groups.items():
        assert len(members) >= 2, f"{pair}: a pair of one"
        assert {t.split for t in members} == {Split.TRAIN.value}
        first = members[0]
        for other in members[1:]:
            assert other.files == first.files, f"{pair}: members' repositories differ"
            assert _one_word_apart(first.instruction, other.instruction), (
                first.instruction,
                other.instruction,
            )
            assert other.tests != first.tests
        assert len({t.instruction for t in members}) == len(members)


@pytest.mark.parametrize("template", PAIRED, ids=lambda t: t.name)
def test_no_pair_reaches_the_heldout_split(template: Template) -> None:
    heldout = list(template.tasks(Split.HELDOUT))
    assert heldout
    assert not [t.id for t in heldout if PAIR_KEY in t.metadata]
    # one deciding word per choice of names and phrasing there, every word used somewhere
    choices = [{k: v for k, v in t.metadata["params"].items() if k != "which"} for t in heldout]
    assert len({str(sorted(c.items())) for c in choices}) == len(choices)
    words = {t.metadata["params"]["which"] for t in heldout}
    assert words == set(template.words)  # type: ignore[attr-defined]


@pytest.mark.parametrize("template", PAIRED, ids=lambda t: t.name)
def test_every_answer_fails_the_other_members_hidden_tests(template: Template) -> None:
    """The repository is the same, so only the instruction tells the members apart: each
    member's solution passes its own hidden tests and fails every other member's."""
    members = next(iter(_groups(template).values()))
    for task in members:
        solved = task.solved_files()
        assert grade_files(task, solved).success, task.id
        for other in members:
            if other is not task:
                report = grade_files(other, solved)
                assert not report.success, f"{task.id}'s answer passes {other.id}"


def test_a_pair_is_never_split_between_training_and_validation() -> None:
    from composer_rl.tasks.templates.base import is_validation

    for template in PAIRED:
        groups: dict[str, set[bool]] = {}
        for task in template.tasks(Split.TRAIN):
            groups.setdefault(task.metadata[PAIR_KEY], set()).add(is_validation(task))
        assert all(len(sides) == 1 for sides in groups.values()), template.name
        assert any(True in sides for sides in groups.values()), template.name
