"""Tasks round-trip through both on-disk formats; bad files give errors that say what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer_rl.tasks import (
    DirectoryTaskSource,
    Split,
    Task,
    TaskFormatError,
    collect_tasks,
    load_tasks,
    sample_tasks,
    save_task_dir,
    save_tasks_jsonl,
)


@pytest.fixture(scope="module")
def some_tasks() -> list[Task]:
    return sample_tasks(collect_tasks(Split.HELDOUT), per_group=1)


def test_directory_round_trip(tmp_path: Path, some_tasks: list[Task]) -> None:
    for task in some_tasks:
        save_task_dir(task, tmp_path / task.id)
    loaded = load_tasks(tmp_path)
    assert sorted(loaded, key=lambda t: t.id) == sorted(some_tasks, key=lambda t: t.id)
    assert load_tasks(tmp_path / some_tasks[0].id) == [some_tasks[0]]


def test_jsonl_round_trip(tmp_path: Path, some_tasks: list[Task]) -> None:
    path = save_tasks_jsonl(some_tasks, tmp_path / "tasks.jsonl")
    assert load_tasks(path) == some_tasks


def test_bad_json_line_names_file_and_line(tmp_path: Path, some_tasks: list[Task]) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(some_tasks[0].model_dump_json() + "\n{not json\n")
    with pytest.raises(TaskFormatError, match=r"tasks.jsonl:2: invalid JSON"):
        load_tasks(path)


def test_missing_field_is_named(tmp_path: Path, some_tasks: list[Task]) -> None:
    data = json.loads(some_tasks[0].model_dump_json())
    del data["instruction"]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(
        TaskFormatError, match=r"t.jsonl:1: invalid task: instruction: Field required"
    ):
        load_tasks(path)


def test_path_escaping_the_repository_is_rejected(tmp_path: Path, some_tasks: list[Task]) -> None:
    data = json.loads(some_tasks[0].model_dump_json())
    data["files"] = {"../evil.py": "x"}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(TaskFormatError, match="points outside the repository"):
        load_tasks(path)


def test_duplicate_ids_are_rejected(tmp_path: Path, some_tasks: list[Task]) -> None:
    path = save_tasks_jsonl([some_tasks[0], some_tasks[0]], tmp_path / "t.jsonl")
    with pytest.raises(TaskFormatError, match="appears twice"):
        load_tasks(path)


def test_directory_without_hidden_tests(tmp_path: Path, some_tasks: list[Task]) -> None:
    directory = save_task_dir(some_tasks[0], tmp_path / "t")
    for f in (directory / "_grading").iterdir():
        f.unlink()
    (directory / "_grading").rmdir()
    with pytest.raises(TaskFormatError, match="no _grading/ folder"):
        load_tasks(directory)


def test_not_a_task_path(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="no such file"):
        load_tasks(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskFormatError, match="holds no tasks"):
        load_tasks(tmp_path / "empty")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(TaskFormatError, match="must be JSONL"):
        load_tasks(tmp_path / "x.txt")


def test_directory_source_uses_default_split(tmp_path: Path, some_tasks: list[Task]) -> None:
    task = some_tasks[0].model_copy(update={"id": "mine", "metadata": {}})
    save_tasks_jsonl([task], tmp_path / "mine.jsonl")
    source = DirectoryTaskSource("mine", tmp_path)
    assert [t.id for t in source.tasks(Split.HELDOUT)] == ["mine"]
    assert list(source.tasks(Split.TRAIN)) == []
