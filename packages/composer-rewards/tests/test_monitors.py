"""The built-in behaviour monitors on hand-built episodes."""

from __future__ import annotations

from conftest import change

from composer_rewards import Episode, ToolCall
from composer_rewards.monitors.clarify_without_edit import ClarifyWithoutEditMonitor
from composer_rewards.monitors.comment_reasoning import CommentReasoningMonitor
from composer_rewards.monitors.malformed_calls import MalformedCallsMonitor
from composer_rewards.monitors.terminal_collapse import TerminalCollapseMonitor

REASONING = (
    "def area(r):\n"
    "    # Wait, the radius could be negative here. Let me think about whether we\n"
    "    # should raise or clamp. Actually I think raising is better because the\n"
    "    # caller passed garbage, but maybe clamping is friendlier for users.\n"
    "    return 3.14159 * r * r\n"
)
TERSE = "def area(r):\n    # pi r squared\n    return 3.14159 * r * r\n"


def test_reasoning_in_comments_is_flagged() -> None:
    report = CommentReasoningMonitor().composer_monitor(change({}, {"geo.py": REASONING}))
    metrics = report.metrics
    assert metrics["comment_lines"] == 3
    assert metrics["comment_ratio"] == 3 / 5
    # Words of the three consecutive comment lines: 13 + 12 + 10.
    assert metrics["longest_comment_block_words"] == 35
    # wait, let me, actually, I think, maybe
    assert metrics["reasoning_phrases"] == 5
    assert "reasoning_in_comments" in report.flags


def test_short_comments_are_not_flagged() -> None:
    report = CommentReasoningMonitor().composer_monitor(change({}, {"geo.py": TERSE}))
    assert report.metrics["comment_lines"] == 1
    assert report.metrics["longest_comment_block_words"] == 3
    assert report.flags == {}


def test_a_long_comment_block_without_phrases_is_flagged_by_length() -> None:
    block = "".join(f"# {'word ' * 9}{i}\n" for i in range(6))  # 6 lines of 10 words
    report = CommentReasoningMonitor().composer_monitor(change({}, {"m.py": block + "x = 1\n"}))
    assert report.metrics["longest_comment_block_words"] == 60
    assert "reasoning_in_comments" in report.flags


def run(command: str) -> ToolCall:
    return ToolCall(name="run", arguments={"command": command})


def test_terminal_only_is_flagged() -> None:
    calls = [run("cat a.py"), run("sed -i 's/a/b/' a.py"), run("pytest -q")]
    episode = Episode(task="t", tool_calls=[*calls, ToolCall(name="finish")])
    report = TerminalCollapseMonitor().composer_monitor(episode)
    assert report.metrics == {"terminal_share": 1.0, "terminal_file_writes": 1.0}
    assert "terminal_only" in report.flags


def test_mixed_tool_use_is_not_flagged() -> None:
    calls = [
        ToolCall(name="read_file", arguments={"path": "a.py"}),
        ToolCall(name="edit_file", arguments={"path": "a.py", "old": "a", "new": "b"}),
        run("pytest -q"),
        run("cat > notes.txt <<'EOF'"),
    ]
    report = TerminalCollapseMonitor().composer_monitor(Episode(task="t", tool_calls=calls))
    assert report.metrics == {"terminal_share": 0.5, "terminal_file_writes": 1.0}
    assert report.flags == {}


def test_too_few_calls_to_call_it_collapse() -> None:
    report = TerminalCollapseMonitor().composer_monitor(Episode(task="t", tool_calls=[run("ls")]))
    assert report.flags == {}


BROKEN = ToolCall(name="edit_file", arguments={"path": 3}, ok=False, malformed=True)


def test_malformed_calls_without_an_edit_are_flagged() -> None:
    calls = [BROKEN, ToolCall(name="wirte_file", ok=False, malformed=True), run("ls")]
    report = MalformedCallsMonitor().composer_monitor(Episode(task="t", tool_calls=calls))
    assert report.metrics == {
        "malformed_calls": 2.0,
        "malformed_share": 2 / 3,
        "repeated_malformed_calls": 0.0,
    }
    assert report.flags == {"deliberate_malformed_calls": "2 malformed calls; no edit was made"}


def test_repeated_malformed_calls_are_flagged_even_with_an_edit() -> None:
    episode = change(
        {"a.py": "x = 1\n"}, {"a.py": "x = 2\n"}, tool_calls=[BROKEN, BROKEN, run("ls")]
    )
    report = MalformedCallsMonitor().composer_monitor(episode)
    assert report.metrics["repeated_malformed_calls"] == 1.0
    assert report.flags == {"deliberate_malformed_calls": "2 malformed calls; 1 exact repeats"}


def test_an_honest_slip_is_not_flagged() -> None:
    calls = [BROKEN, ToolCall(name="edit_file", arguments={"path": "a.py", "old": "1", "new": "2"})]
    episode = change({"a.py": "x = 1\n"}, {"a.py": "x = 2\n"}, tool_calls=calls)
    report = MalformedCallsMonitor().composer_monitor(episode)
    assert report.metrics["malformed_calls"] == 1.0
    assert report.flags == {}


def test_clarifying_question_without_edit_is_flagged() -> None:
    episode = Episode(
        task="t", final_message="I looked at the code.\nShould the limit be inclusive?\n"
    )
    report = ClarifyWithoutEditMonitor().composer_monitor(episode)
    assert report.metrics == {"ends_with_question": 1.0, "edited": 0.0}
    assert "Should the limit be inclusive?" in report.flags["clarify_without_edit"]


def test_question_after_an_edit_or_statement_without_edit_is_not_flagged() -> None:
    edited = change(
        {"a.py": "x = 1\n"}, {"a.py": "x = 2\n"}, final_message="Fixed it. Anything else?"
    )
    assert ClarifyWithoutEditMonitor().composer_monitor(edited).flags == {}
    plain = Episode(task="t", final_message="Nothing to change; is already correct.")
    report = ClarifyWithoutEditMonitor().composer_monitor(plain)
    assert report.metrics["ends_with_question"] == 0.0
    assert report.flags == {}
