"""The agent's tools: names and arguments as composer-infra's sandbox serves them.

Kept as data here so that the text format can check a parsed call (unknown tool, missing
argument) without importing the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolSpec:
    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    integer: tuple[str, ...] = field(default=())

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.required + self.optional


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec("read_file", ("path",)),
        ToolSpec("write_file", ("path", "content")),
        ToolSpec("edit_file", ("path", "old", "new")),
        ToolSpec("list_files", (), ("path",)),
        ToolSpec("run", ("command",), ("timeout",), integer=("timeout",)),
        ToolSpec("todo", ("action",), ("item", "id")),
        ToolSpec("finish", (), ("message",)),
    )
}
