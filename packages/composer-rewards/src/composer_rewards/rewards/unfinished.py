"""Unfinished work: placeholders the diff added and todo items the agent left open.

Counted in the ``unfinished_code`` component, from lines the diff added:

- a ``TODO``, ``FIXME`` or ``XXX`` marker (any file);
- ``raise NotImplementedError`` (Python files);
- a function whose body is only ``pass`` (after an optional docstring), where the ``pass``
  is an added line. Abstract methods and overloads are not placeholders; neither is a
  ``pass`` in an ``except`` or a class body, nor a ``...`` body (protocols, stubs).

Counted in ``open_todos``: todo items the agent created and did not finish or cancel.
Each component is ``-min(1, per_item * count)``.
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.diff import parse_diff
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent

_MARKER = re.compile(r"\b(TODO|FIXME|XXX)\b")
_NOT_IMPLEMENTED = re.compile(r"^\s*raise\s+NotImplementedError\b")
_EXEMPT_DECORATORS = {"abstractmethod", "overload", "abstractproperty"}


class UnfinishedSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_placeholder: float = Field(default=0.25, ge=0)
    per_open_todo: float = Field(default=0.25, ge=0)
    weight: float = 0.2


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def pass_placeholder_lines(source: str) -> set[int]:
    """Line numbers of ``pass`` statements that are a function's whole body."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    lines = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if any(_decorator_name(d) in _EXEMPT_DECORATORS for d in node.decorator_list):
            continue
        body = list(node.body)
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]
        if len(body) == 1 and isinstance(body[0], ast.Pass):
            lines.add(body[0].lineno)
    return lines


def placeholders(episode: Episode) -> list[str]:
    """Each placeholder the diff added, as ``path:line: what``."""
    found = []
    for path, change in parse_diff(episode.diff).items():
        is_python = path.endswith(".py")
        for number, text in change.added:
            if _MARKER.search(text):
                found.append(f"{path}:{number}: {_MARKER.search(text).group(1)}")  # type: ignore[union-attr]
            elif is_python and _NOT_IMPLEMENTED.match(text):
                found.append(f"{path}:{number}: raise NotImplementedError")
        content = episode.changed_files.get(path)
        if is_python and content is not None:
            added = change.added_line_numbers
            for number in sorted(pass_placeholder_lines(content) & added):
                found.append(f"{path}:{number}: pass placeholder")
    return found


class UnfinishedWorkPenalty(ConfiguredPlugin[UnfinishedSettings]):
    name = "unfinished"
    settings_type = UnfinishedSettings

    @hookimpl
    def composer_reward(self, episode: Episode) -> list[RewardComponent]:
        settings = self.settings
        found = placeholders(episode)
        open_items = [
            item.text for item in episode.todo_items if item.created_by == "agent" and item.is_open
        ]
        return [
            RewardComponent(
                name="unfinished_code",
                value=-min(1.0, settings.per_placeholder * len(found)),
                weight=settings.weight,
                details="; ".join(found),
            ),
            RewardComponent(
                name="open_todos",
                value=-min(1.0, settings.per_open_todo * len(open_items)),
                weight=settings.weight,
                details="; ".join(open_items),
            ),
        ]
