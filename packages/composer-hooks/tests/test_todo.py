"""The one todo item type sandboxes keep and reward plugins read."""

from __future__ import annotations

import dataclasses

import pytest

from composer_hooks.todo import TodoItem


def test_an_item_is_open_until_done_or_cancelled() -> None:
    item = TodoItem(text="write tests")
    assert item.is_open and item.created_by == "agent"
    started = dataclasses.replace(item, status="in_progress")
    assert started.is_open and item.status == "open"  # a change is a new item
    assert not dataclasses.replace(item, status="done").is_open
    assert not dataclasses.replace(item, status="cancelled").is_open


def test_unknown_statuses_and_authors_are_refused() -> None:
    with pytest.raises(ValueError, match="todo status 'finished'"):
        TodoItem(text="x", status="finished")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="todo author 'user'"):
        TodoItem(text="x", created_by="user")  # type: ignore[arg-type]
