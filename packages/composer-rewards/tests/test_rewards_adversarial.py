"""Every heuristic reward against messages a policy could produce to game it.

The inputs: gibberish (repeated or random words), keyword stuffing (the words the checks
look for, and nothing else), copying the task instruction back, an empty message, and a
huge message. Before this, "blah blah blah blah blah blah blah blah" on an episode that
changed nothing scored 1.0 on communication. Each test states what the reward cannot tell
(the README says the same).
"""

from __future__ import annotations

import random

import pytest
from conftest import change

from composer_rewards import Episode, TestResults, ToolCall
from composer_rewards.rewards.communication import CommunicationReward
from composer_rewards.rewards.correctness import CorrectnessReward
from composer_rewards.rewards.length import LengthPenalty, LengthSettings
from composer_rewards.rewards.style import StyleReward
from composer_rewards.rewards.unfinished import UnfinishedWorkPenalty

TASK = (
    "The function total in calc.py should return the sum of the numbers from one to n "
    "inclusive, but the tests show it stops one short. Fix it and make sure the tests pass."
)
FIX = ({"calc.py": "def total(n):\n    return sum(range(n))\n"},
       {"calc.py": "def total(n):\n    return sum(range(n + 1))\n"})  # fmt: skip
HONEST_EDIT = (
    "Fixed the off-by-one in calc.py: range now includes n. I ran pytest and all 3 tests pass."
)
HONEST_NO_EDIT = (
    "I made no changes: calc.py already returns the inclusive sum, and the tests pass as it is."
)
_rng = random.Random(0)
ADVERSARIAL = {
    "repeated": "blah blah blah blah blah blah blah blah",
    "random letters": " ".join(
        "".join(_rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(5)) for _ in range(14)
    ),
    "keyword stuffing": "fixed updated changed calc.py tests pytest passing verified checked ran",
    "stuffing in a sentence": "changed updated fixed modified tests pytest verified checked "
    "confirmed passing calc.py and the tests",
    "copied instruction": TASK,
    "empty": "",
    # Found by RL: a no-op episode ending "Done." was paid the "how checked" third by default.
    "one word": "Done.",
    "huge": HONEST_EDIT + " " + " ".join(["The change is small and safe."] * 200),
}
# The honest messages are backed by the transcript: an edit, then a passing test run.
EDIT = ToolCall(name="edit_file", arguments={"path": "calc.py", "old": "n)", "new": "n + 1)"})
RUN_OK = ToolCall(name="run", arguments={"command": "pytest"}, ok=True, output="3 passed in 0.01s")


def edited(message: str) -> Episode:
    return change(
        *FIX,
        task=TASK,
        final_message=message,
        test_results=TestResults(passed=3),
        tool_calls=[EDIT, RUN_OK],
    )


def unedited(message: str) -> Episode:
    return Episode(
        task=TASK, final_message=message, test_results=TestResults(passed=3), tool_calls=[RUN_OK]
    )


def communication(episode: Episode) -> float:
    return CommunicationReward().composer_reward(episode)[0].value


@pytest.mark.parametrize("make", [edited, unedited], ids=["edited", "no-edit"])
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_communication_gives_gaming_messages_nothing(make: object, name: str) -> None:
    assert callable(make)
    honest = communication(make(HONEST_EDIT if make is edited else HONEST_NO_EDIT))
    gamed = communication(make(ADVERSARIAL[name]))
    assert honest == 1.0
    assert gamed == 0.0, (name, gamed)


def test_the_reported_blah_case_and_why() -> None:
    score = CommunicationReward().composer_reward(unedited(ADVERSARIAL["repeated"]))[0]
    assert score.value == 0.0
    assert "one word is 8 of 8 words" in score.details


def test_a_silent_no_change_message_does_not_pass_what_changed() -> None:
    # Before: a message without a change verb counted as "says nothing changed".
    message = "The numbers in the file are summed with a loop over the range of the input."
    score = CommunicationReward().composer_reward(unedited(message))[0]
    assert "what_changed" not in score.details
    # Nor "how checked" (it says nothing about a check): only "proportionate" is earned.
    assert "how_checked" not in score.details
    assert score.value == pytest.approx(1 / 3)


def test_what_communication_cannot_tell() -> None:
    # It used to score 1.0 a fluent message naming a file the diff does not touch; now that
    # costs (see test_communication_claims.py) ...
    lie = "I fixed the parser in parse.py so that it handles empty input; pytest passes now."
    score, claim = CommunicationReward().composer_reward(edited(lie))
    assert (score.value, claim.value) == (pytest.approx(2 / 3), -1.0)
    # ... but a message that names the right file and describes the change wrongly still
    # scores 1.0: what the change *does* is for the judge.
    wrong_story = "I fixed calc.py so that it handles empty input; pytest: 3 passed now."
    assert communication(edited(wrong_story)) == 1.0


# --- the other heuristic rewards: a message cannot buy them anything ------------------------

MESSAGES = {**ADVERSARIAL, "honest": HONEST_EDIT}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_correctness_reads_test_results_not_the_message(name: str) -> None:
    failing = change(
        *FIX, task=TASK, final_message=MESSAGES[name], test_results=TestResults(failed=3)
    )
    assert CorrectnessReward().composer_reward(failing).value == 0.0
    assert CorrectnessReward().composer_reward(edited(MESSAGES[name])).value == 1.0


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_unfinished_reads_the_diff_not_the_message(name: str) -> None:
    message = MESSAGES[name] + " TODO FIXME XXX raise NotImplementedError"
    values = [c.value for c in UnfinishedWorkPenalty().composer_reward(edited(message))]
    assert values == [0.0, 0.0]  # markers in the message are not placeholders in code
    stub = change(
        {}, {"calc.py": "def total(n):\n    pass  # TODO\n"}, task=TASK, final_message=message
    )
    assert UnfinishedWorkPenalty().composer_reward(stub)[0].value < 0


def test_what_unfinished_cannot_tell() -> None:
    # A disguised marker or a stub that returns a constant is not seen.
    disguised = change({}, {"calc.py": "def total(n):\n    return 0  # T0D0\n"}, task=TASK)
    assert UnfinishedWorkPenalty().composer_reward(disguised)[0].value == 0.0


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_style_reads_the_code_not_the_message(name: str) -> None:
    component = StyleReward().composer_reward(edited(MESSAGES[name]))
    assert component is not None and component.value == 0.0  # clean code, whatever is said
    messy = change({}, {"calc.py": "import os\ndef total(n):\n    return n == None\n"}, task=TASK,
                   final_message=MESSAGES[name])  # fmt: skip
    penalty = StyleReward().composer_reward(messy)
    assert penalty is not None and penalty.value < 0


@pytest.mark.parametrize("path", ["-x.py", "--fix.py", "--config=ruff.py", "- .py"])
def test_style_lints_files_whose_names_look_like_options(path: str) -> None:
    # Found by RL: a file named like an option made ruff exit 2 and the style reward
    # go missing for the episode.
    messy = change({}, {path: "import os\ndef total(n):\n    return n == None\n"}, task=TASK)
    penalty = StyleReward().composer_reward(messy)
    assert penalty is not None and penalty.value < 0


def test_what_style_cannot_tell() -> None:
    # Deleting code adds no lines, so nothing is linted: no penalty for a destructive change.
    deleted = change(
        {"calc.py": "def total(n):\n    return sum(range(n))\n"}, {"calc.py": ""}, task=TASK
    )
    component = StyleReward().composer_reward(deleted)
    assert component is None or component.value == 0.0


def test_length_charges_a_huge_message_more_than_an_honest_one() -> None:
    from composer_rewards import TokenCounts

    def cost(message: str) -> float:
        tokens = TokenCounts(final_message=len(message.split()))
        episode = change(*FIX, task=TASK, final_message=message, tokens=tokens)
        return LengthPenalty(LengthSettings(charged="always")).composer_reward(episode).value

    assert cost(ADVERSARIAL["huge"]) < cost(HONEST_EDIT) < cost("") <= 0.0
    # What it cannot tell: an empty message costs least; communication is what punishes it.
    assert cost("") == 0.0
