"""`benchmarks/episode_ends.py`: where a policy's greedy episodes end, counted from the
episodes themselves."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from composer_rewards import ToolCall
from composer_rl.rl.config import RLConfig
from composer_rl.tasks import Task

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "episode_ends.py"


def test_a_later_checkpoint_is_set_against_the_first_paired_over_tasks(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    """Differences per task, then their mean and standard error: the spread of the
    per-task differences, not of each rate, so a shared hard task cancels."""
    first = {
        "solved": {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0},
        "failed_read_again": {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0},
        "recovered": {"a": 0.0},
    }
    later = {
        "solved": {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0},
        "failed_read_again": {"a": 0.0, "b": 0.0, "c": 0.0, "d": 1.0},
        "recovered": {"b": 1.0},  # no task in common: nothing to pair
    }
    lines = benchmark_script("episode_ends").paired_lines("runs/lost/sft/final", first, later)
    assert lines[0].startswith("== runs/lost/sft/final minus the first checkpoint")
    # solved: differences 1, 0, 0, 0 -> +0.25, s.e. sqrt(0.25/4) = 0.25
    assert lines[1] == "    solved: +0.250 ± 0.250 (4)"
    # failed_read_again: differences -1, -1, 0, 0 -> -0.5, s.d. sqrt(1/3), s.e. /2
    se = math.sqrt(1 / 3) / 2
    assert lines[2] == f"    failed_read_again: -0.500 ± {se:.3f} (4)"
    assert len(lines) == 3  # recovered: no task in common


@pytest.mark.slow  # about a minute: 31 episodes of a random tiny model
def test_quick_run_counts_the_episodes_it_kept(tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    header = done.stdout.splitlines()[0]
    turns = RLConfig().rollout.max_turns  # the turn limit learning_margin.py scores with
    assert header == f"{len(rows)} validation_words tasks, turn limit {turns}"
    assert len({r["task"] for r in rows}) == len(rows) > 20  # one greedy episode a task
    stops = Counter(r["stop"] for r in rows)
    printed = next(line for line in done.stdout.splitlines() if "stopped by:" in line)
    for stop, count in stops.items():
        assert f"{stop} {count} (" in printed
    calls = sum(len(r["calls"]) for r in rows)
    assert f"calls a episode {calls / len(rows):.2f}" in done.stdout
    assert "failed_read_again:" in done.stdout
    assert "== baseline do_nothing: solved 0.000" in done.stdout  # it never edits
    assert "== baseline random: solved " in done.stdout


def test_a_checkpoint_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"error: {tmp_path} has no tokenizer.json: give a stage-one checkpoint"
    )


def _read(path: str, ok: bool) -> ToolCall:
    return ToolCall(name="read_file", arguments={"path": path}, ok=ok)


def test_missing_names_are_told_apart_by_whether_the_task_holds_them(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    task = Task(
        id="add_docstring-x",
        category="documentation",
        difficulty=1,
        instruction="Add a docstring to `chisel` in `persuade.py` that explains `pond`.",
        files={"persuade.py": "def chisel(pond):\n    return pond\n", "tests/test_persuade.py": ""},
        tests={"_grading/test_x.py": "def test_x():\n    pass\n"},
    )
    source = benchmark_script("episode_ends").missing_name_source
    assert source("chisel.py", task) == "in the task"  # a word of the instruction
    assert source("tests/test_persuade.py", task) == "in the task"  # a file's path
    assert source("sudit.py", task) == "nowhere in the task"  # recalled or invented
    assert source("persuad.py", task) == "nowhere in the task"  # a blend is not the word


def test_the_read_after_a_failed_read_and_a_listing_says_whether_the_listing_was_used(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    listing = ToolCall(name="list_files")
    calls = [
        _read("grades.py", False), listing, _read("grades.py", False),  # the same miss
        listing, _read("pebble.py", True),  # after the second miss: the listing was used
        _read("lookup.py", False), listing, _read("pebble.py", True),  # the right file
        _read("trek.py", False), listing, _read("treks.py", False),  # another miss
        _read("a.py", False), ToolCall(name="run"), _read("a.py", False),  # no listing
        _read("b.py", True), listing, _read("c.py", False),  # the first read found its file
    ]  # fmt: skip
    assert benchmark_script("episode_ends").read_after_listing(calls) == [
        "same missing path",
        "right file",
        "right file",
        "another missing path",
    ]
