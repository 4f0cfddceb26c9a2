from __future__ import annotations

import pytest
from conftest import change
from pydantic import ValidationError

from composer_rewards import Episode, Message, TestResults, ToolCall
from composer_rewards.diff import changed_line_count, parse_diff


def test_counts_default_to_what_the_lists_show() -> None:
    episode = Episode(
        task="t",
        messages=[
            Message(role="user", content="do it"),
            Message(role="assistant", content="ok"),
            Message(role="tool", content="out"),
            Message(role="assistant", content="done"),
        ],
        tool_calls=[ToolCall(name="run", arguments={"command": "ls"})],
    )
    assert episode.num_turns == 2
    assert episode.num_tool_calls == 1


def test_explicit_counts_win_over_the_lists() -> None:
    # Self-summarization drops early turns from the messages; the loop passes the true counts.
    episode = Episode(task="t", num_turns=40, num_tool_calls=90)
    assert (episode.num_turns, episode.num_tool_calls) == (40, 90)


def test_episode_is_immutable_and_strict() -> None:
    episode = Episode(task="t")
    with pytest.raises(ValidationError):
        episode.task = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        Episode(task="t", reward=1.0)  # type: ignore[call-arg]


def test_test_results_properties() -> None:
    assert not TestResults().ran
    assert TestResults(passed=3).all_passed
    assert not TestResults(passed=3, errors=1).all_passed
    assert TestResults(passed=3, failed=1, errors=1).total == 5


def test_parse_diff_numbers_added_lines_as_in_the_new_file() -> None:
    before = {"m.py": "a\nb\nc\nd\n", "gone.py": "x\ny\n"}
    after = {"m.py": "a\nB\nc\nd\ne\n", "new.py": "n1\nn2\n"}
    episode = change(before, after)
    changes = parse_diff(episode.diff)
    assert set(changes) == {"m.py", "new.py"}  # the deleted file has no new side
    assert changes["m.py"].added == [(2, "B"), (5, "e")]
    assert changes["m.py"].removed == 1
    assert changes["new.py"].added == [(1, "n1"), (2, "n2")]
    # m.py: +2 -1, new.py: +2, gone.py: -2
    assert changed_line_count(episode.diff) == 7
    assert episode.edited
