"""The tool-call text format round-trips every string and flags what it cannot read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from composer_rewards import ToolCall
from composer_rl.agent.format import (
    TOOL_CALL,
    TOOL_CALL_END,
    parse_output,
    render_call,
)

values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=80
) | st.sampled_from(["@@path", "\\@@old", "\\\\@@x\n@@new", "", "\n", "a\n\n"])


@settings(max_examples=300, deadline=None)
@given(path=values, old=values, new=values)
def test_edit_call_round_trips(path: str, old: str, new: str) -> None:
    call = ToolCall(name="edit_file", arguments={"path": path, "old": old, "new": new})
    parsed = parse_output(render_call(call))
    assert parsed.calls == [call]


def test_code_is_written_raw() -> None:
    text = render_call(
        ToolCall(name="write_file", arguments={"path": "a.py", "content": 'x = "a\\n"\n'})
    )
    assert 'x = "a\\n"' in text  # not JSON-escaped


def test_several_calls_and_integer_arguments() -> None:
    text = render_call(
        ToolCall(name="run", arguments={"command": "ls", "timeout": 5})
    ) + render_call(ToolCall(name="finish", arguments={}))
    parsed = parse_output(text)
    assert [c.name for c in parsed.calls] == ["run", "finish"]
    assert parsed.calls[0].arguments == {"command": "ls", "timeout": 5}


def test_malformed_calls_are_flagged_not_raised() -> None:
    cases = {
        "delete_everything\n@@path\nx\n": "unknown tool",
        "read_file\n": "missing argument",
        "read_file\n@@file\nx\n": "takes no argument",
        "read_file\nx\n@@path\ny\n": "before the first",
        "read_file\n@@path\na\n@@path\nb\n": "given twice",
        "run\n@@command\nls\n@@timeout\nsoon\n": "must be an integer",
        "read_file\n@@path\nx": "end with a newline",
    }
    for body, error in cases.items():
        (call,) = parse_output(TOOL_CALL + body + TOOL_CALL_END).calls
        assert not call.ok and error in (call.error or ""), (body, call)


def test_unterminated_call() -> None:
    parsed = parse_output(TOOL_CALL + "read_file\n@@path\nx.py\n")
    assert parsed.unterminated and not parsed.calls[0].ok


def test_plain_text_has_no_calls() -> None:
    parsed = parse_output("I think the answer is 4.<|end_of_turn|>")
    assert parsed.calls == [] and parsed.finished_turn


def test_a_call_closed_but_never_opened_is_malformed_not_a_message() -> None:
    # The broken call RL learned to end failing episodes with (rl-length-solved record).
    parsed = parse_output("run\n@@command\npython -m pytest -q\n" + TOOL_CALL_END)
    (call,) = parsed.calls
    assert call.malformed and not call.ok and call.name == "run"
    assert TOOL_CALL in (call.error or "") and "no" in (call.error or "")
    (prose,) = parse_output("Read shop.py.\n" + TOOL_CALL_END).calls  # a finish lost its head
    assert prose.malformed
    well_formed = parse_output("thinking " + render_call(ToolCall(name="finish", arguments={})))
    assert [c.ok for c in well_formed.calls] == [True]
