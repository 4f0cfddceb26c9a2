"""The report's four remaining categories: each has templates with hidden tests and an
oracle, and the graders cannot be passed cheaply (a review naming every line, a correct but
slow function, a fix that edits the file it was told to leave alone). Every category has a
template whose change spans several files and tens of lines (issues #18 and 31)."""

from __future__ import annotations

import re
import statistics

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Category, Edit, Split, Task, grade_files
from composer_rl.tasks.stats import changed_lines, medians_by_category, task_size
from composer_rl.tasks.templates import MULTI_FILE_TEMPLATES

BY_NAME = {t.name: t for t in BUILTIN_TEMPLATES}


def _first(name: str, split: Split = Split.HELDOUT) -> Task:
    return next(iter(BY_NAME[name].tasks(split)))


ORDER = [
    "fix_operator", "off_by_one", "cross_file_bug", "add_offset", "add_sort_flag",
    "implement_stub", "add_string_function", "extract_constant", "rename_function",
    "read_constant", "find_definition", "add_docstring", "write_tests", "review_diff",
    "review_and_fix", "memoize_recursion", "batch_queries", "fix_config", "fix_ci",
    "move_callers", "tuples_to_dataclass", "pick_item", "keep_items", "float_money",
    "add_cli_option", "add_command", "rename_field", "remove_dead_code", "fix_doc_examples",
    "write_package_tests", "address_review", "index_lookups", "prints_to_logging",
]  # fmt: skip
"""The templates in the order they were added: new ones go at the end."""


def test_the_templates_keep_their_order_and_the_first_thirteen_their_sizes() -> None:
    """SFT learns from these templates' demonstrations: the order stays, and the first
    thirteen keep split sizes near those they had before names came from the split
    vocabulary (5418 / 1374): the rewrite widened the names, not the mix. Ids changed
    with the parameters (issue #29); pinned again here, so that a change shows."""
    assert [t.name for t in BUILTIN_TEMPLATES] == ORDER
    old = BUILTIN_TEMPLATES[:13]
    assert sum(sum(1 for _ in t.tasks(Split.TRAIN)) for t in old) == 5422
    assert sum(sum(1 for _ in t.tasks(Split.HELDOUT)) for t in old) == 1370
    assert _first("fix_operator", Split.TRAIN).id == "fix_operator-000137b9a0"


def test_every_category_has_a_multi_file_template_of_tens_of_lines() -> None:
    """Issue #18 gave its four categories one change across several files each; issue 31
    asks every category for one of several files and tens of lines (20 or more)."""
    assert {BY_NAME[n].category for n in MULTI_FILE_TEMPLATES} == set(Category)
    tens: set[Category] = set()
    for name in MULTI_FILE_TEMPLATES:
        sizes = [task_size(t) for t in BY_NAME[name].tasks()]
        assert statistics.median(s.files_changed for s in sizes) >= 3, name
        assert statistics.median(s.changed_lines for s in sizes) >= 10, name
        assert BY_NAME[name].difficulty == 3
        if statistics.median(s.changed_lines for s in sizes) >= 20:
            tens.add(BY_NAME[name].category)
    assert tens == set(Category)


def test_changed_lines_counts_added_plus_removed() -> None:
    assert changed_lines({"a": "x\ny\n"}, {"a": "x\nz\n"}) == 2
    assert changed_lines({}, {"new.py": "1\n2\n3\n"}) == 3
    assert changed_lines({"a": "1\n"}, {"a": "1\n", "b": "2\n"}) == 1
    task = _first("tuples_to_dataclass")
    assert task.metadata["changed_lines"] == changed_lines(task.files, task.solved_files())


def test_medians_per_category_cover_every_category() -> None:
    tasks = [t for tpl in BUILTIN_TEMPLATES for t in tpl.tasks(Split.HELDOUT)]
    rows = medians_by_category(tasks)
    assert set(rows) == {c.value for c in Category}
    assert rows["migration"].changed_lines > rows["debugging"].changed_lines


def _passes(task: Task, files: dict[str, str]) -> bool:
    return grade_files(task, files).success


def test_review_that_names_every_line_fails() -> None:
    task = _first("review_diff")
    path = next(p for p in task.files if p.endswith(".py"))
    lines = len(task.files[path].splitlines())
    stuffed = "\n".join(f"{path}:{n}" for n in range(1, lines + 1))
    assert _passes(task, task.solved_files())
    assert not _passes(task, {**task.files, "REVIEW.md": stuffed})


def test_review_and_fix_needs_both_the_review_and_the_fixes() -> None:
    task = _first("review_and_fix")
    solved = task.solved_files()
    assert _passes(task, solved)
    assert not _passes(task, {**solved, "REVIEW.md": "looks good\n"})
    only_review = {**task.files, "REVIEW.md": solved["REVIEW.md"]}
    assert not _passes(task, only_review)


def test_optimisation_is_graded_on_a_counted_cost() -> None:
    task = _first("batch_queries")
    # Correct answers but still one query per key: fails on the count, not the values.
    report = grade_files(task, task.files)
    assert report.failed == 3 and "queries; at most 1" in report.output
    assert "time" not in task.tests["_grading/test_task.py"]  # never wall-clock
    memo = _first("memoize_recursion")
    assert "calls" in grade_files(memo, memo.files).output


def test_devops_fix_must_leave_the_code_alone() -> None:
    task = _first("fix_config")
    patched_app = task.files["app.py"].replace(
        'json.loads(Path("settings.json").read_text())', '{"name": "x"}'
    )
    assert not _passes(task, {**task.files, "app.py": patched_app})
    ci = _first("fix_ci")
    assert _passes(ci, ci.solved_files())
    out = grade_files(ci, ci.files).output
    assert re.search(r"step compile failed|failed", out)


def test_migration_leaves_no_old_form() -> None:
    task = _first("move_callers")
    solved = task.solved_files()
    # The new API used everywhere but the old helper kept: not a finished migration.
    kept = {**solved, "compat.py": task.files["compat.py"]}
    assert _passes(task, solved) and not _passes(task, kept)


@pytest.mark.parametrize("name", [t.name for t in BUILTIN_TEMPLATES])
def test_templates_have_short_instructions_and_both_splits(name: str) -> None:
    template = BY_NAME[name]
    heldout = list(template.tasks(Split.HELDOUT))
    train = list(template.tasks(Split.TRAIN))
    assert heldout and train
    assert max(len(t.instruction) for t in heldout + train) < 200
    assert all(t.solution for t in heldout)
    assert all(Edit.model_validate(e.model_dump()) == e for e in heldout[0].solution)


@pytest.mark.slow  # three fresh interpreters (about a minute)
def test_task_content_does_not_depend_on_the_hash_seed() -> None:
    """A task's text must be the same in every interpreter run (a set's repr is not)."""
    import subprocess
    import sys

    code = (
        "from composer_rl.eval.bench import bench_digest\n"
        "from composer_rl.tasks import BUILTIN_TEMPLATES, Split\n"
        "print(bench_digest([t for tpl in BUILTIN_TEMPLATES for t in tpl.tasks(Split.HELDOUT)]))\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1
