"""The agent's todo item: kept by a sandbox's `todo` tool, read by reward plugins.

composer-infra's sandboxes keep the list (`composer_infra.sandbox.tools.TodoList`) and
composer-rewards' `Episode.todo_items` carries it to the plugins as it stood at the end.
Neither package may import the other (composer-rewards stays light; composer-infra depends
on composer-hooks alone), so the one definition lives here, in the base both import, as a
plain frozen dataclass: no dependency beyond the standard library, and pydantic models that
hold it (`TodoList`, `Episode`) validate and serialise it like a model of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

TodoStatus = Literal["open", "in_progress", "done", "cancelled"]
TodoAuthor = Literal["agent", "task"]


@dataclass(frozen=True)
class TodoItem:
    """One item of the agent's plan; a status change is a new item (`dataclasses.replace`)."""

    text: str
    status: TodoStatus = "open"
    created_by: TodoAuthor = "agent"

    def __post_init__(self) -> None:
        if self.status not in get_args(TodoStatus):
            raise ValueError(f"todo status {self.status!r} is not one of {get_args(TodoStatus)}")
        if self.created_by not in get_args(TodoAuthor):
            raise ValueError(
                f"todo author {self.created_by!r} is not one of {get_args(TodoAuthor)}"
            )

    @property
    def is_open(self) -> bool:
        return self.status in ("open", "in_progress")


__all__ = ["TodoAuthor", "TodoItem", "TodoStatus"]
