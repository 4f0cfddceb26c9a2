"""The templates of issue 31 (a change across several files and tens of lines in every
category): their hidden tests hold against edits that look solved without being solved.

Each attack is an edit a reward-seeking policy could make on a real built-in task: a scan
of a list of ids the code made itself (the grader's counting list never sees it), a
review ticked with nothing done, examples deleted rather than fixed, an alias that makes
the old examples pass, a property that keeps the old field name, a test file that checks
nothing, diagnostics sent to stderr without levels. Each must be graded failed while the
oracle passes. `diff_edits`, which writes these templates' oracles, is checked here too.
"""

from __future__ import annotations

import re

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Edit, Split, Task, grade_files
from composer_rl.tasks.templates import MULTI_FILE_TEMPLATES
from composer_rl.tasks.templates.common import diff_edits, file_edits

TEMPLATES = {t.name: t for t in BUILTIN_TEMPLATES}
ISSUE_31 = [
    "float_money",
    "add_cli_option",
    "add_command",
    "rename_field",
    "remove_dead_code",
    "fix_doc_examples",
    "write_package_tests",
    "address_review",
    "index_lookups",
    "prints_to_logging",
]


def _task(name: str, split: Split = Split.TRAIN) -> Task:
    return next(iter(TEMPLATES[name].tasks(split)))


def _passes(task: Task, files: dict[str, str]) -> bool:
    return grade_files(task, files).success


def test_they_are_the_multi_file_templates_of_the_older_categories() -> None:
    assert set(ISSUE_31) <= set(MULTI_FILE_TEMPLATES)
    assert [t.name for t in BUILTIN_TEMPLATES[-len(ISSUE_31) :]] == ISSUE_31
    categories = {TEMPLATES[n].category for n in ISSUE_31}
    assert len(categories) == len(ISSUE_31)  # one a category
    for name in ISSUE_31:
        task = _task(name)
        assert task.metadata["files_changed"] >= 3 and task.metadata["changed_lines"] >= 20
        assert TEMPLATES[name].difficulty == 3
        assert len(TEMPLATES[name].wrong_edits(dict(task.metadata["params"]))) >= 3


def test_a_list_of_ids_scanned_per_order_is_still_quadratic() -> None:
    task = _task("index_lookups")
    solved = task.solved_files()
    scanning = {
        **solved,
        "audit.py": 'def unknown(purchases, customers):\n    ids = [c["id"] for c in customers]\n'
        '    return [o["id"] for o in purchases if o["customer"] not in ids]\n',
    }
    report = grade_files(task, scanning)
    assert not report.success and "at most" in report.output
    assert _passes(task, solved)


def test_a_review_ticked_with_nothing_done_fails() -> None:
    task = _task("address_review")
    solved = task.solved_files()
    ticked = {**task.files, "REVIEW.md": solved["REVIEW.md"]}
    assert not _passes(task, ticked)
    assert _passes(task, solved)


def test_dropped_examples_and_an_alias_for_the_old_api_fail() -> None:
    task = _task("fix_doc_examples")
    params = task.metadata["params"]
    solved = task.solved_files()
    module = f"{params['module']}.py"
    dropped = {
        path: "".join(line for line in text.splitlines(keepends=True) if ">>>" not in line)
        for path, text in solved.items()
        if path.endswith(".md") or path == module
    }
    assert not _passes(task, {**solved, **dropped})
    # the code given an alias so the 1.x examples run: the code was to stay as it is
    alias = f"\n\n{params['old']} = {params['new']}\n"
    assert not _passes(task, {**solved, module: solved[module] + alias})
    assert _passes(task, solved)


def test_a_property_keeping_the_old_field_name_fails() -> None:
    task = _task("rename_field")
    old, new = task.metadata["params"]["old"], task.metadata["params"]["new"]
    solved = task.solved_files()
    aliased = (
        solved["models.py"] + f"\n    @property\n    def {old}(self):\n        return self.{new}\n"
    )
    assert not _passes(task, {**solved, "models.py": aliased})
    assert _passes(task, solved)


def test_test_files_that_check_nothing_fail() -> None:
    task = _task("write_package_tests")
    solved = task.solved_files()
    hollow = {
        path: re.sub(r"assert .*", "assert True", text)
        for path, text in solved.items()
        if path.startswith("tests/")
    }
    assert not _passes(task, {**solved, **hollow})
    assert _passes(task, solved)


def test_dead_code_removal_must_keep_what_the_command_table_reaches() -> None:
    task = _task("remove_dead_code")
    params = task.metadata["params"]
    solved = task.solved_files()
    # every function but the commands and main deleted: the helper the commands call goes too
    gutted = {**solved, f"{params['other']}.py": "\n"}
    assert not _passes(task, gutted)
    assert _passes(task, solved)


@pytest.mark.parametrize("name", ISSUE_31)
def test_the_oracle_passes_on_held_out_names_too(name: str) -> None:
    task = _task(name, Split.HELDOUT)
    assert _passes(task, task.solved_files())
    assert not _passes(task, task.files)


# -- diff_edits ------------------------------------------------------------------------------


def test_diff_edits_makes_one_unique_edit_per_run_of_changed_lines() -> None:
    before = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\ng = 7\n"
    after = "a = 1\nb = 20\nc = 3\nd = 4\ne = 5\nf = 60\ng = 7\n"
    edits = file_edits("m.py", before, after)
    assert [(e.old, e.new) for e in edits] == [("b = 2\n", "b = 20\n"), ("f = 6\n", "f = 60\n")]
    # an insertion is widened by the line before it, repeated lines until unique
    repeated = "x\nx\ny = 1\nz = 2\nw = 3\n"
    inserted = "x\nx\nnew\ny = 1\nz = 2\nw = 3\n"
    (insert,) = file_edits("m.py", repeated, inserted)
    assert insert == Edit(path="m.py", old="x\nx\n", new="x\nx\nnew\n")
    files = {"m.py": repeated, "n.py": "keep\n"}
    out = diff_edits(files, {"m.py": inserted, "n.py": "keep\n", "o.py": "made\n"})
    assert out == [insert, Edit(path="o.py", new="made\n")]
    result = dict(files)
    for edit in out:
        result = edit.apply(result)
    assert result == {"m.py": inserted, "n.py": "keep\n", "o.py": "made\n"}


def test_diff_edits_writes_the_file_when_that_is_shorter() -> None:
    (edit,) = file_edits("m.py", "a\nb\n", "c\nd\n")
    assert edit == Edit(path="m.py", new="c\nd\n")
