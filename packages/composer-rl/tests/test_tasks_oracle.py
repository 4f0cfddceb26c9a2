"""Every template's oracle solution passes its hidden tests and the unsolved repository
fails them (one held-out task per template here; a seeded sample of each split under the
slow marker)."""

from __future__ import annotations

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, grade_files, sample_tasks
from composer_rl.tasks.sources import collect_tasks


def _check(task: Task) -> None:
    solved = grade_files(task, task.solved_files())
    assert solved.success, f"{task.id}: oracle fails\n{solved.output}"
    unsolved = grade_files(task, task.files)
    assert not unsolved.success, f"{task.id}: the unsolved repo already passes"
    assert unsolved.failed + unsolved.errors > 0 or unsolved.exit_code != 0


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_oracle_passes_and_unsolved_fails(template) -> None:  # type: ignore[no-untyped-def]
    task = next(iter(template.tasks(Split.HELDOUT)))
    _check(task)


@pytest.mark.slow
@pytest.mark.parametrize("split", list(Split))
def test_oracle_on_a_sample_of_every_template(split: Split) -> None:
    # One random task a template and split, each graded twice (about a second apiece): two
    # a template made this the suite's slowest file and reached no template that one misses.
    for task in sample_tasks(collect_tasks(split), per_group=1, seed=1):
        _check(task)


def test_grading_reports_per_test_outcomes() -> None:
    task = next(iter(BUILTIN_TEMPLATES[0].tasks(Split.TRAIN)))  # fix_operator: two tests
    report = grade_files(task, task.files)
    assert report.failed == 2 and report.passed == 0
    assert list(report.outcomes.values()) == ["failed", "failed"]
    # half right (the operator right for one test, not for the other) is two outcomes
    fn = task.metadata["params"]["function"]
    (right, _wrong) = task.metadata["params"]["ops"]
    path = task.solution[0].path
    half = "def {fn}(a, b):\n    if a <= 0 or a == b or b > a:\n        return a {op} b\n"
    half = half.format(fn=fn, op=right) + "    return 0\n"
    mixed = grade_files(task, {**task.files, path: half})
    assert sorted(mixed.outcomes.values()) == ["failed", "passed"], mixed.output


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_declared_wrong_edits_fail_the_hidden_tests(template) -> None:  # type: ignore[no-untyped-def]
    """A recovering demonstration's wrong first attempt must be wrong by the grader too."""
    task = next(iter(template.tasks(Split.TRAIN)))
    for edits in template.wrong_edits(dict(task.metadata["params"])):
        files = dict(task.files)
        for edit in edits:
            files = edit.apply(files)
        assert not grade_files(task, files).success, f"{task.id}: {edits} passes"


def test_oracle_edit_that_no_longer_applies_is_a_clear_error() -> None:
    task = next(iter(BUILTIN_TEMPLATES[0].tasks(Split.TRAIN)))
    broken = task.model_copy(update={"files": {k: "pass\n" for k in task.files}})
    with pytest.raises(ValueError, match="occurs 0 times"):
        broken.solved_files()
