"""Behaviour rates read from episodes: what RL is meant to select, measured with its noise."""

from __future__ import annotations

import pytest

from composer_rewards import Episode, ToolCall
from composer_rl.eval.behaviour import (
    behaviour_rates,
    episode_behaviours,
    per_task_behaviours,
    tokens_per_solved,
)
from composer_rl.eval.scores import PolicyScores
from composer_rl.rl.compare import comparison_rows, template_rows
from composer_rl.tasks.model import VISIBLE_TEST_COMMAND

DIFF = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    return a - b\n+    return a + b\n"
TODO_DIFF = DIFF + "+    # TODO: handle negative numbers\n"
READ = ToolCall(name="read_file", arguments={"path": "m.py"}, output="def f(a, b): ...")
EDIT = ToolCall(name="edit_file", arguments={"path": "m.py", "old": "-", "new": "+"})
PASSING = ToolCall(
    name="run", arguments={"command": VISIBLE_TEST_COMMAND}, output="..\n2 passed in 0.01s\n"
)
FAILING = ToolCall(
    name="run",
    arguments={"command": VISIBLE_TEST_COMMAND},
    ok=False,
    error="exit code 1",
    output="F.\nE   AssertionError: f(2, 5) should be 7\n1 failed, 1 passed in 0.01s\n",
)


def _episode(*calls: ToolCall, message: str = "Done.", diff: str = DIFF) -> Episode:
    return Episode(
        task="fix f", tool_calls=calls, final_message=message, diff=diff, changed_files={"m.py": ""}
    )


def test_a_careful_episode_ran_the_tests_after_its_last_edit_and_says_so() -> None:
    careful = _episode(READ, EDIT, PASSING, message="Changed m.py to add. Ran the tests: 2 passed.")
    flags = episode_behaviours(careful, solved=True)
    assert flags["tests_run"] == flags["tested_after_last_edit"] == flags["says_checked"] == 1.0
    assert flags["recovered"] is None  # no failing run: the flag does not apply
    assert flags["todo_left"] == flags["reread"] == 0.0


def test_a_run_before_the_last_edit_checks_nothing() -> None:
    stale = _episode(READ, PASSING, EDIT, message="Ran the tests: 2 passed.")
    flags = episode_behaviours(stale, solved=False)
    assert flags["tests_run"] == 1.0
    assert flags["tested_after_last_edit"] == flags["says_checked"] == 0.0


def test_recovering_todo_and_reread_are_read_from_the_transcript() -> None:
    recovering = _episode(READ, EDIT, FAILING, READ, EDIT, PASSING)
    assert episode_behaviours(recovering, solved=True)["recovered"] == 1.0
    assert episode_behaviours(recovering, solved=False)["recovered"] == 0.0
    assert episode_behaviours(recovering, solved=True)["reread"] == 0.0  # an edit between
    careless = _episode(READ, READ, EDIT, diff=TODO_DIFF)
    flags = episode_behaviours(careless, solved=False)
    assert flags["tests_run"] == 0.0 and flags["todo_left"] == 1.0 and flags["reread"] == 1.0


def test_a_failed_read_made_again_is_flagged_unless_something_could_have_made_the_file() -> None:
    missing = ToolCall(
        name="read_file", arguments={"path": "mathop.py"}, ok=False, error="does not exist"
    )
    assert episode_behaviours(_episode(missing, missing), solved=False)["failed_read_again"] == 1
    # Another path between is still the loop; a listing changes nothing either.
    listing = ToolCall(name="list_files", arguments={}, output="m.py")
    looped = _episode(missing, listing, READ, missing)
    assert episode_behaviours(looped, solved=False)["failed_read_again"] == 1.0
    # Once: no loop. Created by a write or by a command that may write files: a new read.
    assert episode_behaviours(_episode(missing, READ), solved=False)["failed_read_again"] == 0
    write = ToolCall(name="write_file", arguments={"path": "mathop.py", "content": "x = 1\n"})
    made = _episode(missing, write, missing)
    assert episode_behaviours(made, solved=False)["failed_read_again"] == 0.0
    touch = ToolCall(name="run", arguments={"command": "python make.py"})
    assert (
        episode_behaviours(_episode(missing, touch, missing), solved=False)["failed_read_again"]
        == 0.0
    )
    look = ToolCall(name="run", arguments={"command": "ls"})
    assert (
        episode_behaviours(_episode(missing, look, missing), solved=False)["failed_read_again"]
        == 1.0
    )
    # A successful read made twice is `reread`, not this.
    assert episode_behaviours(_episode(READ, READ), solved=False)["failed_read_again"] == 0.0


def test_rates_are_means_over_tasks_with_their_standard_error() -> None:
    careful = _episode(READ, EDIT, PASSING)
    careless = _episode(READ, EDIT)
    per_task = per_task_behaviours(
        [("a", careful, True), ("a", careless, True), ("b", careless, False), ("c", careful, True)]
    )
    assert per_task["tests_run"] == {"a": 0.5, "b": 0.0, "c": 1.0}
    assert "recovered" not in per_task  # no episode failed a run
    mean, se, tasks = behaviour_rates(per_task)["tests_run"]
    assert (mean, tasks) == (pytest.approx(0.5), 3) and se == pytest.approx(0.5 / 3**0.5)
    tokens = tokens_per_solved([("a", 1, 40, True), ("a", 1, 60, True), ("b", 2, 9, True)])
    assert tokens == {"a": 50.0}


def test_comparison_and_template_rows_pair_by_task() -> None:
    sft = PolicyScores(
        "sft",
        "s",
        per_task_pass1={"fix_operator-1": 0.0, "fix_operator-2": 1.0, "pick_item-1": 0.0},
        behaviours={"tests_run": {"fix_operator-1": 0.0, "pick_item-1": 0.0}},
    )
    rl = PolicyScores(
        "rl",
        "r",
        per_task_pass1={"fix_operator-1": 1.0, "fix_operator-2": 1.0, "pick_item-1": 0.0},
        behaviours={"tests_run": {"fix_operator-1": 1.0, "pick_item-1": 1.0}},
    )
    rows = {r["metric"]: r for r in comparison_rows(sft, rl)}
    assert rows["tests_run"]["margin"][0] == pytest.approx(1.0) and rows["tests_run"]["tasks"] == 2
    assert rows["pass@1"]["baselines"] == {}
    do_nothing = PolicyScores(
        "do_nothing",
        "d",
        per_task_pass1={"fix_operator-1": 0.0, "fix_operator-2": 1.0, "pick_item-1": 0.0},
        behaviours={"tests_run": {"fix_operator-1": 0.0, "pick_item-1": 0.0}},
    )
    with_baselines = {
        r["metric"]: r for r in comparison_rows(sft, rl, baselines={"do_nothing": do_nothing})
    }
    assert with_baselines["pass@1"]["baselines"]["do_nothing"][0] == pytest.approx(1 / 3)
    assert with_baselines["tests_run"]["baselines"]["do_nothing"] == (0.0, 0.0)
    by_template = {r["metric"]: r for r in template_rows(sft, rl)}
    assert by_template["fix_operator"]["margin"][0] == pytest.approx(0.5)
    assert by_template["pick_item"]["margin"][0] == pytest.approx(0.0)
    assert by_template["fix_operator"]["tasks"] == 2


def test_behaviour_margins_average_seeds_per_task() -> None:
    from composer_rl.rl.compare import behaviour_margins

    sft = PolicyScores(
        "sft", "s", per_task_pass1={}, behaviours={"todo_left": {"a": 1.0, "b": 0.5}}
    )
    runs = {
        0: PolicyScores(
            "r0", "r", per_task_pass1={}, behaviours={"todo_left": {"a": 0.0, "b": 0.5}}
        ),
        1: PolicyScores(
            "r1", "r", per_task_pass1={}, behaviours={"todo_left": {"a": 0.5, "b": 0.0}}
        ),
    }
    (row,) = behaviour_margins(sft, runs)
    assert row["metric"] == "todo_left" and row["tasks"] == 2
    assert row["seeds"][0]["margin"][0] == pytest.approx(-0.5)
    # Task a: mean over seeds 0.25 - 1.0; task b: 0.25 - 0.5.
    assert row["margin"][0] == pytest.approx((-0.75 - 0.25) / 2)


def test_behaviour_margins_without_a_shared_task_are_not_a_zero_margin() -> None:
    """Tokens per solved task pair only tasks both policies solved; where none is, the
    margin is undefined (NaN), not +0.000, which the table once printed."""
    import math

    from composer_rl.rl.compare import TOKENS_ROW, behaviour_margins

    sft = PolicyScores("sft", "s", per_task_pass1={}, tokens_per_solved_d1={"a": 134.0})
    runs = {0: PolicyScores("r0", "r", per_task_pass1={}, tokens_per_solved_d1={"b": 122.0})}
    (row,) = behaviour_margins(sft, runs)
    assert row["metric"] == TOKENS_ROW and row["tasks"] == 0
    assert all(math.isnan(v) for v in (*row["margin"], *row["seeds"][0]["margin"]))
