"""The torch-free view of one finished episode that reward and monitor plugins read.

The RL loop turns whatever it recorded (token ids, sandbox state, test runs) into this
plain, validated text view once per episode, so a plugin author needs nothing but this
package to write and test a reward: no model, no sandbox, no torch.

Everything is immutable: the same `Episode` object is handed to every plugin, and one
plugin must not be able to change what the next one sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_hooks.todo import TodoItem

Role = Literal["system", "user", "assistant", "tool"]
TestOutcome = Literal["passed", "failed", "error", "skipped"]

# The sandbox tools of composer-infra. `run` is the terminal; the others touch files or plans.
TERMINAL_TOOL = "run"
EDIT_TOOLS = frozenset({"write_file", "edit_file"})
FINISH_TOOL = "finish"

COMPACTIONS_KEY = "compacted_after_turns"
"""`Episode.metadata` key the RL loop sets: the turns after which the episode's context was
condensed (self-summarization or truncation), in order; the tool results of turns up to
such a turn are no longer in the context of later ones (a truncation keeps the latest few)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(_Frozen):
    """One message of the conversation, in order. `thinking` is the hidden reasoning, if any."""

    role: Role
    content: str = ""
    thinking: str = ""


class ToolCall(_Frozen):
    """One tool call the policy made and what the sandbox answered.

    `malformed` is set when the call could not be executed as written: it did not parse,
    named a tool that does not exist, or had arguments that do not fit the tool. The
    sandbox answers such a call with ``ok=False`` rather than raising.

    The one tool-call type of the project: composer-rl's parser of the agent's text
    (`composer_rl.agent.format`) returns it too, before any answer (``ok`` unless
    `malformed`, `error` then saying why), and the episode runner fills in the answer.
    """

    name: str
    arguments: Mapping[str, Any] = Field(default_factory=dict)
    ok: bool = True
    output: str = ""
    error: str | None = None
    malformed: bool = False
    turn: int = 0


class TestResults(_Frozen):
    """The task's tests run on the final workspace, as composer-infra reports them."""

    __test__ = False  # not a pytest test class, despite the name

    passed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    outcomes: Mapping[str, TestOutcome] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors

    @property
    def ran(self) -> bool:
        return self.total > 0

    @property
    def all_passed(self) -> bool:
        return self.ran and self.failed == 0 and self.errors == 0


class TokenCounts(_Frozen):
    """Sampled tokens of the episode split by what they were for (the length penalty's inputs)."""

    thinking: int = Field(default=0, ge=0)
    tool_call: int = Field(default=0, ge=0)
    tool_output: int = Field(default=0, ge=0)
    final_message: int = Field(default=0, ge=0)


class Episode(_Frozen):
    """A finished episode as text.

    `diff` is the unified diff of the workspace against the task's starting state.
    `changed_files` maps each path the diff touches to its content after the episode
    (None for a deleted file); rewards that must run tools on the code (ruff) use it.
    `num_tool_calls` and `num_turns` default to what `tool_calls` and `messages` show;
    the loop sets them explicitly when self-summarization dropped earlier turns.
    `metadata` is free-form; the loop puts the task id, the stop reason and, under
    :data:`COMPACTIONS_KEY`, the turns after which the context was condensed.
    """

    task: str
    messages: tuple[Message, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    final_message: str = ""
    diff: str = ""
    changed_files: Mapping[str, str | None] = Field(default_factory=dict)
    test_results: TestResults = Field(default_factory=TestResults)
    tokens: TokenCounts = Field(default_factory=TokenCounts)
    num_tool_calls: int = Field(default=-1, ge=-1)
    num_turns: int = Field(default=-1, ge=-1)
    todo_items: tuple[TodoItem, ...] = ()
    metadata: Mapping[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _count_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("num_tool_calls", -1) == -1:
            data["num_tool_calls"] = len(data.get("tool_calls", ()))
        if data.get("num_turns", -1) == -1:
            messages = data.get("messages", ())
            data["num_turns"] = sum(
                1
                for m in messages
                if (m.role if isinstance(m, Message) else dict(m).get("role")) == "assistant"
            )
        return data

    @property
    def edited(self) -> bool:
        """Whether the episode changed the workspace at all."""
        return bool(self.diff.strip()) or bool(self.changed_files)
