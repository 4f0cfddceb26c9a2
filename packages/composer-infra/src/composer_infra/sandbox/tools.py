"""The agent's tools: argument schemas, and the todo list they keep.

The schemas are pydantic models so that a malformed call (missing argument, wrong
type, unknown field) becomes an error message naming the problem, which the model
can read and fix on its next turn.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from composer_hooks.todo import TodoItem, TodoStatus


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReadFileArgs(_Args):
    path: str


class WriteFileArgs(_Args):
    path: str
    content: str


class EditFileArgs(_Args):
    path: str
    old: str = Field(min_length=1)
    new: str


class ListFilesArgs(_Args):
    path: str = "."


class RunArgs(_Args):
    command: str = Field(min_length=1)
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @field_validator("command")
    @classmethod
    def _no_nul(cls, command: str) -> str:
        if "\x00" in command:
            raise ValueError("a command cannot contain NUL bytes (\\x00); remove them")
        return command


class TodoArgs(_Args):
    action: Literal["add", "start", "complete", "cancel", "list"]
    item: str | None = Field(default=None, min_length=1, description="Text, for `add`.")
    id: int | None = Field(default=None, ge=1, description="Item number, for the others.")


class FinishArgs(_Args):
    message: str = ""


TOOL_ARGS: dict[str, type[_Args]] = {
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "list_files": ListFilesArgs,
    "run": RunArgs,
    "todo": TodoArgs,
    "finish": FinishArgs,
}
"""Every tool a sandbox offers, by the name the model calls it."""


class TodoList(BaseModel):
    """The agent's plan (`composer_hooks.todo.TodoItem`, the type composer-rewards'
    `Episode.todo_items` holds too)."""

    items: list[TodoItem] = Field(default_factory=list)

    def render(self) -> str:
        if not self.items:
            return "(todo list is empty)"
        marks = {"open": "[ ]", "in_progress": "[~]", "done": "[x]", "cancelled": "[-]"}
        return "\n".join(
            f"{n}. {marks[item.status]} {item.text}" for n, item in enumerate(self.items, 1)
        )

    def apply(self, args: TodoArgs) -> str:
        """Carry out one `todo` call; ValueError with the reason if it cannot be done."""
        if args.action == "add":
            if not args.item:
                raise ValueError("todo add needs `item`, the text of the new item")
            self.items.append(TodoItem(text=args.item))
        elif args.action != "list":
            if args.id is None or args.id > len(self.items):
                raise ValueError(
                    f"todo {args.action} needs `id`, an item number from 1 to {len(self.items)}"
                )
            status: dict[str, TodoStatus] = {
                "start": "in_progress",
                "complete": "done",
                "cancel": "cancelled",
            }
            self.items[args.id - 1] = replace(self.items[args.id - 1], status=status[args.action])
        return self.render()
