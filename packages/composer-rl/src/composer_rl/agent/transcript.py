"""An episode's text as segments, each marked as written by the model or not.

The same segments serve three uses: the SFT example (train on the model's segments only),
the inference prompt (the engine continues after the last segment), and token accounting
by kind for rewards. Segments are tokenized one by one, exactly as an episode grows at
inference time (prompt, generated call, appended tool result, ...), so SFT data and
rollouts tokenize the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from composer_rewards import ToolCall
from composer_rl.agent.format import (
    END_OF_TURN,
    render_call,
    render_prompt,
    render_result,
)

SegmentKind = Literal["prompt", "tool_call", "tool_output", "final_message", "summary"]


class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Segment:
    kind: SegmentKind
    text: str

    @property
    def trainable(self) -> bool:
        return self.kind in ("tool_call", "final_message", "summary")


@dataclass
class Transcript:
    segments: list[Segment] = field(default_factory=list)

    @classmethod
    def start(cls, instruction: str) -> Transcript:
        return cls([Segment("prompt", render_prompt(instruction))])

    def add_call(self, call: ToolCall) -> None:
        self.segments.append(Segment("tool_call", render_call(call)))

    def add_result(self, output: str) -> None:
        self.segments.append(Segment("tool_output", render_result(output)))

    def end_turn(self) -> None:
        self.segments.append(Segment("final_message", END_OF_TURN))

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    def call_tokens(self, tokenizer: Encoder) -> list[int]:
        """Tokens of each tool call, in order: one call is one model turn (the runner stops a
        turn at the call's closing token), so a runner plays this transcript whole only if
        its `max_turns` is at least the count and its `max_new_tokens` at least the largest."""
        return [len(tokenizer.encode(s.text)) for s in self.segments if s.kind == "tool_call"]

    def encode(self, tokenizer: Encoder) -> tuple[list[int], list[bool]]:
        """(token ids, which of them the model wrote)."""
        ids: list[int] = []
        mask: list[bool] = []
        for seg in self.segments:
            piece = tokenizer.encode(seg.text)
            ids += piece
            mask += [seg.trainable] * len(piece)
        return ids, mask


def tool_output_text(ok: bool, output: str, error: str | None) -> str:
    """What the model reads back from a tool call."""
    if ok:
        return output
    return f"error: {error}" + (f"\n{output}" if output else "")


def count_tokens(segments: Sequence[Segment], tokenizer: Encoder) -> dict[str, int]:
    counts = {"tool_call": 0, "tool_output": 0, "final_message": 0, "thinking": 0}
    for seg in segments:
        # A self-summary is the model thinking about its own context: it counts as such.
        kind = "thinking" if seg.kind == "summary" else seg.kind
        if kind in counts:
            counts[kind] += len(tokenizer.encode(seg.text))
    return counts
