"""Tasks on disk, so that users bring their own.

Two formats, both plain text a person can write by hand:

* a task directory::

      my-task/
        task.json        {"id", "category", "difficulty", "instruction",
                          "test_command"?, "metadata"?, "solution"? (list of edits)}
        repo/...         the repository the agent starts from
        _grading/...     the hidden tests (run by `test_command` from the repo root)

* a JSONL file: one `Task` per line, with `files` and `tests` as {path: content}.

`load_tasks(path)` accepts a task directory, a directory of task directories, or a JSONL
file, and every error names the file (and line) and what to change. Given a `problems`
list it reads on past malformed tasks, collecting one error for each, so that one bad
task in a folder does not hide the others (`composer-rl tasks validate` reports each).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from composer_rl.tasks.model import GRADING_DIR, Task

TASK_FILE = "task.json"
REPO_DIR = "repo"


class TaskFormatError(ValueError):
    """A task file that cannot be read; the message says where and what to fix."""


def _read_tree(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(root).as_posix()
            try:
                files[rel] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise TaskFormatError(
                    f"{path}: tasks hold text files only (UTF-8); remove or convert this file"
                ) from exc
    return files


def save_task_dir(task: Task, directory: Path) -> Path:
    """Write `task` as a task directory (created; existing files are overwritten)."""
    directory.mkdir(parents=True, exist_ok=True)
    header = task.model_dump(mode="json", exclude={"files", "tests"})
    (directory / TASK_FILE).write_text(json.dumps(header, indent=2) + "\n", encoding="utf-8")
    for rel, content in task.files.items():
        target = directory / REPO_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    for rel, content in task.tests.items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    return directory


def load_task_dir(directory: Path) -> Task:
    header_path = directory / TASK_FILE
    if not header_path.is_file():
        raise TaskFormatError(
            f"{directory}: not a task directory (no {TASK_FILE}); see composer_rl.tasks.io"
        )
    try:
        header = json.loads(header_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskFormatError(
            f"{header_path}: invalid JSON at line {exc.lineno}: {exc.msg}"
        ) from exc
    if not isinstance(header, dict):
        raise TaskFormatError(
            f"{header_path}: must hold a JSON object, not {type(header).__name__}"
        )
    for key in ("files", "tests"):
        if key in header:
            raise TaskFormatError(
                f"{header_path}: {key!r} does not belong in {TASK_FILE}; put the files under "
                f"{REPO_DIR}/ and the hidden tests under {GRADING_DIR}/"
            )
    repo = directory / REPO_DIR
    grading = directory / GRADING_DIR
    if not grading.is_dir():
        raise TaskFormatError(f"{directory}: no {GRADING_DIR}/ folder with the hidden tests")
    header["files"] = _read_tree(repo) if repo.is_dir() else {}
    header["tests"] = {f"{GRADING_DIR}/{k}": v for k, v in _read_tree(grading).items()}
    return _validate(header, str(header_path))


def _validate(data: object, where: str) -> Task:
    try:
        return Task.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<task>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise TaskFormatError(f"{where}: invalid task: {problems}") from exc


def save_tasks_jsonl(tasks: Iterable[Task], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(task.model_dump_json() + "\n")
    return path


def _read_jsonl_line(path: Path, number: int, line: str) -> Task:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TaskFormatError(f"{path}:{number}: invalid JSON: {exc.msg}") from exc
    return _validate(data, f"{path}:{number}")


def load_tasks_jsonl(path: Path, problems: list[TaskFormatError] | None = None) -> list[Task]:
    tasks: list[Task] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                tasks.append(_read_jsonl_line(path, number, line))
            except TaskFormatError as exc:
                if problems is None:
                    raise
                problems.append(exc)
    return _unique(tasks, str(path), problems)


def _unique(tasks: list[Task], where: str, problems: list[TaskFormatError] | None) -> list[Task]:
    """`tasks` with ids checked unique: an error, or (collecting) the later copies dropped."""
    seen: set[str] = set()
    kept: list[Task] = []
    for task in tasks:
        if task.id in seen:
            error = TaskFormatError(
                f"{where}: task id {task.id!r} appears twice; ids must be unique"
            )
            if problems is None:
                raise error
            problems.append(error)
            continue
        seen.add(task.id)
        kept.append(task)
    return kept


def load_tasks(path: Path, problems: list[TaskFormatError] | None = None) -> list[Task]:
    """Read a task directory, a directory of task directories, or a JSONL file.

    Without `problems` the first malformed task raises `TaskFormatError`. With a list, each
    malformed task directory, JSONL line or duplicate id is appended to it and skipped;
    a path that holds no tasks at all still raises.
    """
    path = Path(path)
    if not path.exists():
        raise TaskFormatError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix != ".jsonl":
            raise TaskFormatError(f"{path}: a task file must be JSONL (ending in .jsonl)")
        return load_tasks_jsonl(path, problems)
    if (path / TASK_FILE).is_file():
        return [load_task_dir(path)]
    tasks: list[Task] = []
    found = 0
    for child in sorted(path.iterdir()):
        if not child.is_dir():
            continue
        found += 1
        try:
            tasks.append(load_task_dir(child))
        except TaskFormatError as exc:
            if problems is None:
                raise
            problems.append(exc)
    for file in sorted(path.glob("*.jsonl")):
        found += 1
        tasks += load_tasks_jsonl(file, problems)
    if not found:
        raise TaskFormatError(
            f"{path}: holds no tasks (expected {TASK_FILE}, task directories or *.jsonl files)"
        )
    return _unique(tasks, str(path), problems)
