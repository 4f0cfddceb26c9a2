"""How a conversation and its tool calls are written as text (and so as tokens).

A tiny model has to learn this format from a few thousand demonstrations, so it avoids
everything that costs it effort: no JSON, no escaping of code, one argument per block::

    <|system|>...<|end_of_turn|>
    <|user|>instruction<|end_of_turn|>
    <|assistant|><|tool_call|>edit_file
    @@path
    scores.py
    @@old
        return a - b
    @@new
        return a + b
    <|/tool_call|><|tool_result|>ok<|/tool_result|><|tool_call|>finish
    @@message
    Fixed.
    <|/tool_call|><|end_of_turn|>

The first line of a call is the tool name; each argument is a `@@name` line followed by
its raw value and one newline. A value line that itself starts with `@@` is written with a
leading backslash (and a backslash before such a line is doubled), so every string
round-trips. Parsing never raises: a call that cannot be read comes back flagged.

A parsed call is composer-rewards' `ToolCall`, the one type of a tool call: parsed, it has a
name and arguments (or `malformed` with the reason in `error`); the episode runner adds the
sandbox's answer and the turn, and reward plugins read that same object.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from composer_rewards import ToolCall
from composer_rl.agent.tools import TOOLS

SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL_CALL = "<|tool_call|>"
TOOL_CALL_END = "<|/tool_call|>"
TOOL_RESULT = "<|tool_result|>"
TOOL_RESULT_END = "<|/tool_result|>"
THINK = "<|think|>"
THINK_END = "<|/think|>"
END_OF_TURN = "<|end_of_turn|>"
ARG_PREFIX = "@@"

SYSTEM_PROMPT = (
    "You are a coding agent. Use the tools read_file, write_file, edit_file, list_files, "
    "run and finish to complete the task in the repository."
)


def _malformed(name: str, error: str, arguments: dict[str, str | int] | None = None) -> ToolCall:
    """A call that cannot be run as written: `malformed`, not `ok`, and why."""
    return ToolCall(name=name, arguments=arguments or {}, ok=False, error=error, malformed=True)


def _escape_line(line: str) -> str:
    stripped = line.lstrip("\\")
    if stripped.startswith(ARG_PREFIX):
        return "\\" + line
    return line


def _unescape_line(line: str) -> str:
    stripped = line.lstrip("\\")
    if stripped.startswith(ARG_PREFIX) and line.startswith("\\"):
        return line[1:]
    return line


def render_call_body(name: str, arguments: Mapping[str, object]) -> str:
    """The text between `<|tool_call|>` and `<|/tool_call|>`."""
    parts = [name, "\n"]
    for key, value in arguments.items():
        text = str(value)
        parts += [ARG_PREFIX, key, "\n", "\n".join(_escape_line(x) for x in text.split("\n")), "\n"]
    return "".join(parts)


def render_call(call: ToolCall) -> str:
    return TOOL_CALL + render_call_body(call.name, call.arguments) + TOOL_CALL_END


def render_result(output: str, max_chars: int = 2000) -> str:
    if len(output) > max_chars:
        output = output[: max_chars // 2] + "\n...[truncated]...\n" + output[-max_chars // 2 :]
    return TOOL_RESULT + output + TOOL_RESULT_END


def render_prompt(instruction: str, system: str = SYSTEM_PROMPT) -> str:
    """Everything before the model's first token of an episode."""
    return f"{SYSTEM}{system}{END_OF_TURN}{USER}{instruction}{END_OF_TURN}{ASSISTANT}"


def parse_call_body(body: str) -> ToolCall:
    """Read the text between the call markers; never raises."""
    name, newline, rest = body.partition("\n")
    name = name.strip()
    if name not in TOOLS:
        return _malformed(name, f"unknown tool {name!r}; tools: {', '.join(TOOLS)}")
    spec = TOOLS[name]
    if not newline or (not rest.endswith("\n") and rest):
        return _malformed(name, "the call must end with a newline before its end marker")
    arguments: dict[str, str | int] = {}
    current: str | None = None
    lines: list[str] = []

    def close() -> None:
        if current is not None:
            arguments[current] = "\n".join(_unescape_line(x) for x in lines)

    for line in rest[:-1].split("\n") if rest else []:
        if line.startswith(ARG_PREFIX):
            close()
            current, lines = line[len(ARG_PREFIX) :], []
            if current not in spec.arguments:
                return _malformed(name, f"{name} takes no argument {current!r}")
            if current in arguments:
                return _malformed(name, f"argument {current!r} given twice")
        elif current is None:
            return _malformed(name, f"text before the first {ARG_PREFIX}argument line")
        else:
            lines.append(line)
    close()
    missing = [a for a in spec.required if a not in arguments]
    if missing:
        return _malformed(name, f"missing argument(s) {missing}", arguments)
    for key in spec.integer:
        if key in arguments:
            try:
                arguments[key] = int(str(arguments[key]).strip())
            except ValueError:
                return _malformed(name, f"{key} must be an integer", arguments)
    return ToolCall(name=name, arguments=arguments)


@dataclass(frozen=True)
class ParsedTurn:
    """What one stretch of model output contains."""

    text: str
    calls: list[ToolCall]
    finished_turn: bool
    unterminated: bool


def iter_call_bodies(text: str) -> Iterator[tuple[str, bool]]:
    """(body, terminated) for each `<|tool_call|>` in `text`."""
    pos = 0
    while (start := text.find(TOOL_CALL, pos)) != -1:
        start += len(TOOL_CALL)
        end = text.find(TOOL_CALL_END, start)
        if end == -1:
            yield text[start:], False
            return
        yield text[start:end], True
        pos = end + len(TOOL_CALL_END)


def parse_output(text: str) -> ParsedTurn:
    """Parse model output (up to a stop marker) into tool calls, flagging malformed ones.

    A call closed without being opened (`run`, its argument lines and `<|/tool_call|>`, with
    no `<|tool_call|>` before it) is a malformed call, not a message with no call. Read as no
    call, it ended the episode at once: RL with a length cost charged on failures learned to
    end failing episodes that way, skipping the test run (docs/rl/
    2026-12-06-rl-length-solved.md). As a malformed call it gets an error and a next turn,
    like every other broken call."""
    calls: list[ToolCall] = []
    unterminated = False
    closer = text.find(TOOL_CALL_END)
    if closer != -1 and TOOL_CALL not in text[:closer]:
        name = text[:closer].lstrip().partition("\n")[0].strip()
        calls.append(
            _malformed(
                name, f"the call has no {TOOL_CALL} before it; a call opens with {TOOL_CALL}"
            )
        )
    for body, terminated in iter_call_bodies(text):
        if terminated:
            calls.append(parse_call_body(body))
        else:
            unterminated = True
            calls.append(_malformed(body.partition("\n")[0].strip(), "unterminated call"))
    return ParsedTurn(
        text=text, calls=calls, finished_turn=END_OF_TURN in text, unterminated=unterminated
    )
