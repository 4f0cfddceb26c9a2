"""An episode's transcript text split into the blocks a reader looks at.

The episode line keeps the transcript as the policy saw it: the agent format's special
markers (`composer_rl.agent.format`) around the system prompt, the instruction, each tool
call and its result, thinking, and self-summaries; a condensed context after a summary
starts again with a system prompt. Splitting on the markers gives blocks the page can
show as a conversation. A random or early policy writes markers in any order, or none, so
the split never raises: text outside any known block is kept as the assistant's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from composer_rl.agent.format import parse_call_body

MARKER = re.compile(r"<\|/?[a-z_]+\|>")
OPENERS = {
    "<|system|>": "system",
    "<|user|>": "user",
    "<|assistant|>": "assistant",
    "<|tool_call|>": "tool_call",
    "<|tool_result|>": "tool_result",
    "<|think|>": "think",
    "<|summary|>": "summary",
}
CLOSERS = {
    "<|/tool_call|>": "tool_call",
    "<|/tool_result|>": "tool_result",
    "<|/think|>": "think",
    "<|/summary|>": "summary",
}
TURN_END = "<|end_of_turn|>"


@dataclass
class Block:
    """One piece of the conversation: who wrote it, its text, which context segment."""

    kind: str
    text: str = ""
    segment: int = 0
    closed: bool = False
    tool: str = ""
    arguments: dict[str, str] = field(default_factory=dict)
    error: str = ""


def split_transcript(text: str) -> list[Block]:
    """The blocks of `text`, in order; empty assistant text between markers is dropped."""
    blocks: list[Block] = []
    segment = -1
    kind = "assistant"
    current: Block | None = None
    role = "assistant"  # the turn a bare text run belongs to

    def flush(closed: bool = False) -> None:
        nonlocal current
        if current is not None:
            current.closed = closed
            if current.text or current.kind != "assistant":
                blocks.append(current)
        current = None

    position = 0
    for match in MARKER.finditer(text):
        chunk = text[position : match.start()]
        position = match.end()
        if chunk:
            if current is None:
                current = Block(kind=role, segment=max(segment, 0))
            current.text += chunk
        marker = match.group()
        if marker in OPENERS:
            flush()
            kind = OPENERS[marker]
            if kind == "system":
                segment += 1
            if kind in ("system", "user", "assistant"):
                role = kind
            current = Block(kind=kind, segment=max(segment, 0))
        elif marker in CLOSERS:
            flush(closed=current is not None and current.kind == CLOSERS[marker])
            current = None
        elif marker == TURN_END:
            flush(closed=True)
            role = "assistant"
        else:  # another special token (end of text, padding): shown where it stands
            flush()
            blocks.append(Block(kind="marker", text=marker, segment=max(segment, 0), closed=True))
    tail = text[position:]
    if tail:
        if current is None:
            current = Block(kind=role, segment=max(segment, 0))
        current.text += tail
    flush()
    for block in blocks:
        if block.kind == "tool_call":
            _read_call(block)
    return blocks


def _read_call(block: Block) -> None:
    call = parse_call_body(block.text)
    block.tool = call.name
    block.arguments = {k: str(v) for k, v in call.arguments.items()}
    block.error = call.error or ""


def blocks_json(text: str) -> list[dict[str, Any]]:
    return [asdict(b) for b in split_transcript(text)]


__all__ = ["Block", "blocks_json", "split_transcript"]
