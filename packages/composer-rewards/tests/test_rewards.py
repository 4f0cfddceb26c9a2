"""The built-in rewards on hand-built episodes; every expected value is worked out here."""

from __future__ import annotations

import pytest
from conftest import change

from composer_rewards import Episode, TestResults, TodoItem, ToolCall
from composer_rewards.rewards.communication import CommunicationReward, CommunicationSettings
from composer_rewards.rewards.correctness import CorrectnessReward, CorrectnessSettings
from composer_rewards.rewards.style import StyleReward, StyleSettings
from composer_rewards.rewards.unfinished import UnfinishedSettings, UnfinishedWorkPenalty

# --- correctness -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("results", "all_pass", "fraction"),
    [
        (TestResults(passed=4), 1.0, 1.0),
        (TestResults(passed=3, failed=1), 0.0, 0.75),
        (TestResults(passed=1, failed=1, errors=2), 0.0, 0.25),
        (TestResults(), 0.0, 0.0),  # nothing ran: no credit
    ],
)
def test_correctness(results: TestResults, all_pass: float, fraction: float) -> None:
    episode = Episode(task="t", test_results=results)
    assert CorrectnessReward().composer_reward(episode).value == all_pass
    reward = CorrectnessReward(CorrectnessSettings(mode="fraction", weight=2.0))
    component = reward.composer_reward(episode)
    assert (component.value, component.weight) == (fraction, 2.0)


# --- style -------------------------------------------------------------------------------

BEFORE = "import os\n\n\ndef f(x):\n    return x\n"  # F401 on line 1, already there
# Six added lines, one of them `y == None` (E711).
AFTER = BEFORE + "\n\ndef g(y):\n    if y == None:\n        return 0\n    return y\n"


def test_style_counts_only_findings_on_added_lines_per_added_line() -> None:
    episode = change({"pkg/m.py": BEFORE}, {"pkg/m.py": AFTER})
    reward = StyleReward(StyleSettings(full_penalty_density=0.5))
    component = reward.composer_reward(episode)
    assert component is not None
    # 1 finding / 6 added lines = 1/6; divided by 0.5 -> 1/3.
    assert component.value == pytest.approx(-1 / 3)
    assert "E711" in component.details and "F401" not in component.details


def test_style_can_count_the_whole_file() -> None:
    episode = change({"pkg/m.py": BEFORE}, {"pkg/m.py": AFTER})
    reward = StyleReward(StyleSettings(full_penalty_density=0.5, only_added_lines=False))
    component = reward.composer_reward(episode)
    assert component is not None
    # 2 findings (F401 + E711) / 6 added lines / 0.5 = 2/3.
    assert component.value == pytest.approx(-2 / 3)


def test_style_is_capped_at_minus_one_and_clean_code_scores_zero() -> None:
    dirty = change({}, {"a.py": "import os\nimport sys\n"})  # 2 findings on 2 lines
    assert StyleReward().composer_reward(dirty).value == -1.0  # type: ignore[union-attr]
    clean = change({}, {"a.py": "def f(x: int) -> int:\n    return x + 1\n"})
    assert StyleReward().composer_reward(clean).value == 0.0  # type: ignore[union-attr]


def test_style_reports_syntax_errors() -> None:
    broken = change({}, {"a.py": "def f(:\n    return 1\n"})
    component = StyleReward().composer_reward(broken)
    assert component is not None and component.value == -1.0
    assert "syntax" in component.details


def test_style_has_nothing_to_say_without_python_changes() -> None:
    episode = change({"README.md": "a\n"}, {"README.md": "b\n"})
    assert StyleReward().composer_reward(episode) is None
    deleted_only = change({"a.py": "x = 1\n"}, {})
    assert StyleReward().composer_reward(deleted_only) is None


# --- communication -----------------------------------------------------------------------

FIX = ({"calc.py": "def total(n):\n    return sum(range(n))\n"},
       {"calc.py": "def total(n):\n    return sum(range(n + 1))\n"})  # fmt: skip
GOOD_MESSAGE = (
    "Fixed the off-by-one in calc.py: range now includes the end. Ran pytest: all 12 tests pass."
)
RUN_OK = ToolCall(name="run", arguments={"command": "pytest"}, ok=True, output="12 passed in 0.05s")
RUN_FAILED = ToolCall(
    name="run",
    arguments={"command": "pytest"},
    ok=False,
    output="F\n1 failed in 0.01s",
    error="exit code 1",
)


def communication(episode: Episode) -> tuple[float, float, str]:
    score, claim = CommunicationReward().composer_reward(episode)
    return score.value, claim.value, claim.details


def test_communication_good_message() -> None:
    episode = change(
        *FIX,
        final_message=GOOD_MESSAGE,
        test_results=TestResults(passed=12),
        tool_calls=[RUN_OK],
    )
    # names the file, says how it was checked, 16 words within [8, 80 + 2 changed lines].
    assert communication(episode) == (1.0, 0.0, "")


def test_communication_false_claim_of_passing_tests() -> None:
    # No run after the edit: "the tests pass" is unbacked and false, and a false claim
    # about the tests does not earn "how checked" (it used to: 1.0).
    episode = change(
        *FIX,
        final_message=GOOD_MESSAGE,
        test_results=TestResults(passed=10, failed=2),
        tool_calls=[],
    )
    value, claim, details = communication(episode)
    assert value == pytest.approx(2 / 3)
    assert claim == -1.0
    assert "ran nothing" in details
    # The visible run after the edit passed: a true report of that run, whatever the
    # hidden tests say (the correctness reward pays those).
    honest = change(
        *FIX,
        final_message=GOOD_MESSAGE,
        test_results=TestResults(passed=10, failed=2),
        tool_calls=[RUN_OK],
    )
    assert communication(honest)[:2] == (1.0, 0.0)


def test_communication_honest_failure_report_is_not_a_false_claim() -> None:
    message = "Changed calc.py, but the tests do not pass yet: test_total still fails."
    # Backed by a failing run after the edit (it used to be paid with no run at all).
    episode = change(
        *FIX, final_message=message, test_results=TestResults(failed=1), tool_calls=[RUN_FAILED]
    )
    assert communication(episode) == (1.0, 0.0, "")


def test_communication_claims_it_ran_tests_without_running_anything() -> None:
    message = "Updated calc.py. I ran the tests and everything works as expected now."
    episode = change(*FIX, final_message=message, test_results=TestResults(passed=3))
    value, claim, details = communication(episode)
    # A false check claim no longer earns "how checked" (it used to: 1.0).
    assert (value, claim) == (pytest.approx(2 / 3), -1.0)
    assert details == "says it ran the tests but ran nothing after its last edit"


def test_communication_claims_no_change_after_editing() -> None:
    message = "No changes were needed; the function is correct as it is and tests pass."
    episode = change(*FIX, final_message=message, test_results=TestResults(passed=3))
    _, claim, details = communication(episode)
    assert claim == -1.0
    # Two false claims now: "tests pass" with no run after the edit, and "no changes".
    assert details.split("; ") == [
        "says the tests pass but ran nothing after its last edit",
        "says nothing changed but the workspace diff is not empty",
    ]


def test_communication_too_short_says_nothing() -> None:
    episode = change(*FIX, final_message="Done.", test_results=TestResults(passed=3))
    # no file or change verb, no check mentioned, 1 word < 8.
    assert communication(episode)[0] == 0.0


def test_communication_disproportionate_message() -> None:
    padding = " ".join(["This line explains the fix in calc.py in great detail."] * 10)
    run = ToolCall(name="run", arguments={"command": "pytest"}, output="1 passed in 0.01s")
    episode = change(
        *FIX,
        final_message=padding + " Tests pass.",
        test_results=TestResults(passed=1),
        tool_calls=[run],
    )
    reward = CommunicationReward(CommunicationSettings(base_words=50, words_per_changed_line=1.0))
    score, claim = reward.composer_reward(episode)
    # 10 * 10 + 2 = 102 words > 50 + 1 * 2 = 52: only "proportionate" fails.
    assert score.value == pytest.approx(2 / 3)
    assert "102 words (limit 52)" in score.details
    assert claim.value == 0.0


def test_communication_without_an_edit() -> None:
    # The message states what the run showed, and a run backs it (it used to be paid for
    # "as the tests show" with no run).
    message = "I did not change anything: the behaviour is already correct; the 2 tests pass."
    run = ToolCall(name="run", arguments={"command": "pytest"}, output="2 passed in 0.01s")
    episode = Episode(
        task="t", final_message=message, test_results=TestResults(passed=2), tool_calls=[run]
    )
    assert communication(episode) == (1.0, 0.0, "")


# --- unfinished work ---------------------------------------------------------------------

UNFINISHED_BEFORE = "def z():\n    pass\n"  # a pre-existing placeholder: not the episode's
UNFINISHED_AFTER = UNFINISHED_BEFORE + (
    "\n\n"
    "def a():\n"  # 5
    "    pass\n"  # 6  placeholder
    "\n\n"
    "def b():\n"  # 9
    '    """Doc."""\n'  # 10
    "    pass\n"  # 11 placeholder (a docstring does not make it real)
    "\n\n"
    "def c():\n"  # 14
    "    raise NotImplementedError\n"  # 15
    "\n\n"
    "def d():\n"  # 18
    "    try:\n"
    "        return 1\n"
    "    except ValueError:\n"
    "        pass\n"  # 22 not a placeholder
    "\n\n"
    "class P:\n"  # 25
    "    @abstractmethod\n"
    "    def e(self):\n"
    "        pass\n"  # 28 abstract: not a placeholder
    "\n\n"
    "x = 1  # TODO: finish\n"  # 31
)


def test_unfinished_code_placeholders_added_by_the_diff() -> None:
    episode = change({"m.py": UNFINISHED_BEFORE}, {"m.py": UNFINISHED_AFTER})
    code, todos = UnfinishedWorkPenalty(UnfinishedSettings(per_placeholder=0.1)).composer_reward(
        episode
    )
    assert code.details.split("; ") == [
        "m.py:15: raise NotImplementedError",
        "m.py:31: TODO",
        "m.py:6: pass placeholder",
        "m.py:11: pass placeholder",
    ]
    assert code.value == pytest.approx(-0.4)  # 4 placeholders * 0.1
    assert todos.value == 0.0


def test_unfinished_markers_in_any_file_but_not_in_removed_lines() -> None:
    episode = change(
        {"notes.md": "FIXME: old\n", "a.py": "# XXX old\n"},
        {"notes.md": "fixed\nFIXME: new one\n", "a.py": "y = 2\n"},
    )
    code, _ = UnfinishedWorkPenalty().composer_reward(episode)
    assert code.details == "notes.md:2: FIXME"
    assert code.value == -0.25


def test_open_todo_items_the_agent_created() -> None:
    episode = Episode(
        task="t",
        todo_items=[
            TodoItem(text="write tests", status="open"),
            TodoItem(text="update docs", status="in_progress"),
            TodoItem(text="fix bug", status="done"),
            TodoItem(text="dropped idea", status="cancelled"),
            TodoItem(text="from the task", status="open", created_by="task"),
        ],
    )
    code, todos = UnfinishedWorkPenalty().composer_reward(episode)
    assert code.value == 0.0
    assert todos.value == -0.5  # 2 open agent items * 0.25
    assert todos.details == "write tests; update docs"
