"""Tasks from users: `tasks validate` and `tasks export` say what is wrong and what to do.

Each test here failed on the code before issue #16's fixes: a format error was an uncaught
traceback, "oracle fails" came with no reason, one malformed task stopped the folder, a
path outside the repository got the advice to write it as `../x.py`, and `export --help`
did not name the default split.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from composer_rl.cli import main
from composer_rl.tasks import Edit, Task, TaskFormatError, load_tasks, save_task_dir
from composer_rl.tasks.checks import oracle_problem
from composer_rl.tasks.model import check_relative_path


def _task(task_id: str = "good", **update: object) -> Task:
    task = Task(
        id=task_id,
        category="debugging",
        difficulty=1,
        instruction="Make f return 1.",
        files={"m.py": "def f():\n    return 0\n"},
        tests={
            "_grading/test_m.py": (
                "from workspace_probe import call\n\n\ndef test_f():\n"
                "    assert call('m', 'f') == 1\n"
            )
        },
        solution=[Edit(path="m.py", old="return 0", new="return 1")],
    )
    return task.model_copy(update=update)


def test_format_error_is_one_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(_task().model_dump_json())
    del data["instruction"]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(data) + "\n")
    assert main(["tasks", "validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert "t.jsonl:1: invalid task: instruction: Field required" in captured.err
    assert len(captured.err.strip().splitlines()) <= 2


def test_missing_path_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "validate", str(tmp_path / "nothing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_oracle_problem_names_the_edit_and_the_file() -> None:
    assert oracle_problem(_task()) is None
    stale = _task(solution=[Edit(path="m.py", old="return 2", new="return 1")])
    reason = oracle_problem(stale)
    assert reason is not None
    assert "solution edit 1 of 1" in reason and "'return 2'" in reason and "0 times" in reason
    empty = oracle_problem(_task(solution=[]))
    assert empty is not None and "solution is empty" in empty
    no_repo = oracle_problem(_task(files={}))
    assert no_repo is not None and "does not exist" in no_repo and "repo/ folder" in no_repo


@pytest.mark.slow  # grades six tasks (7-13 s); test_validate_flags_a_broken_task stays quick
def test_validate_reports_each_task_with_its_reason_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "tasks"
    save_task_dir(_task("a-good"), folder / "a-good")
    save_task_dir(
        _task("b-stale", solution=[Edit(path="m.py", old="return 2", new="return 1")]),
        folder / "b-stale",
    )
    save_task_dir(_task("c-empty", solution=[]), folder / "c-empty")
    shutil.rmtree(save_task_dir(_task("d-norepo"), folder / "d-norepo") / "repo")
    passing = {"_grading/test_m.py": "def test_nothing():\n    assert True\n"}
    save_task_dir(_task("e-trivial", tests=passing), folder / "e-trivial")
    malformed = save_task_dir(_task("f-malformed"), folder / "f-malformed")
    (malformed / "task.json").write_text("{not json")
    assert main(["tasks", "validate", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "a-good: ok" in out
    assert "b-stale: oracle fails: solution edit 1 of 1" in out and "'return 2'" in out
    assert "c-empty: oracle fails: the solution is empty" in out
    assert "d-norepo: oracle fails:" in out and "repo/ folder" in out
    assert "e-trivial: unsolved passes: the hidden tests already pass" in out
    assert "malformed:" in out and "f-malformed/task.json: invalid JSON" in out
    assert "1/6 tasks valid" in out


def test_load_tasks_collects_problems_instead_of_stopping(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = _task().model_dump_json()
    path.write_text(good + "\n{oops\n" + _task("other").model_dump_json() + "\n" + good + "\n")
    with pytest.raises(TaskFormatError, match=r"t\.jsonl:2"):
        load_tasks(path)
    problems: list[TaskFormatError] = []
    assert [t.id for t in load_tasks(path, problems=problems)] == ["good", "other"]
    assert [str(p).split(": ", 1)[1] for p in problems] == [
        "invalid JSON: Expecting property name enclosed in double quotes",
        "task id 'good' appears twice; ids must be unique",
    ]


@pytest.mark.parametrize("path", ["../../../x.py", "a/../../x.py", ".."])
def test_path_outside_the_repository_says_what_is_allowed(path: str) -> None:
    with pytest.raises(ValueError) as info:
        check_relative_path(path)
    message = str(info.value)
    assert "points outside the repository" in message
    assert "relative to the repository root" in message
    assert "without '..'" not in message and "../" not in message.split("write", 1)[1]
    with pytest.raises(ValueError, match="points outside the repository"):
        Edit(path=path, new="x")


def test_unnormalised_path_gets_its_normal_form() -> None:
    with pytest.raises(ValueError, match=r"write it as 'a/x\.py'"):
        Edit(path="a/./x.py", new="x")


def test_help_names_the_default_split(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("export", "validate"):
        with pytest.raises(SystemExit):
            main(["tasks", action, "--help"])
        assert "(default: heldout)" in capsys.readouterr().out


def test_validate_reports_each_task_as_it_goes_when_output_is_a_pipe(tmp_path: Path) -> None:
    """Off a terminal each task's line comes when it is graded, not all at the end: the
    first task's line arrives while the other two are still being graded."""
    folder = tmp_path / "tasks"
    for name in ("a", "b", "c"):
        save_task_dir(_task(name), folder / name)
    command = [sys.executable, "-m", "composer_rl.cli", "tasks", "validate", str(folder)]
    # A user's shell does not set PYTHONUNBUFFERED (CI and this box may): without it Python
    # buffers a pipe's output, as it does a log file's.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as process:
        assert process.stdout is not None
        arrived: list[tuple[float, str]] = [(time.monotonic(), line) for line in process.stdout]
    assert process.returncode == 0, arrived
    assert [line for _, line in arrived] == ["a: ok\n", "b: ok\n", "c: ok\n", "3/3 tasks valid\n"]
    # Two tasks graded in sandboxes (each an oracle run and a grading, seconds) lie between
    # the first line and the last; buffered, all four came in the same instant at the end.
    assert arrived[-1][0] - arrived[0][0] > 0.5, arrived
