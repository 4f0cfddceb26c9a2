"""Reading the lines an episode added from the unified diff of its workspace.

Rewards judge what the episode wrote, not what the repository already contained, so most
of them look only at added lines. Only the parts of the unified format that ``git diff``
and ``diff -u`` emit are needed: file headers, hunk headers and +/-/space lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass
class FileChange:
    """The added lines of one file (numbered as in the new file) and the removed ones.

    `created` is set for a file the diff creates (its old side is ``/dev/null``): a monitor
    treats a new file named like a standard-library module differently from an edit to an
    existing one. `removed_lines` holds each removed line as ``(line number in the new file
    where it was removed, text)``, so a claim that the episode changed some identifier can be
    checked against both sides of the change and the code around it.
    """

    path: str
    added: list[tuple[int, str]] = field(default_factory=list)
    removed: int = 0
    deleted: bool = False
    created: bool = False
    removed_lines: list[tuple[int, str]] = field(default_factory=list)

    @property
    def added_line_numbers(self) -> set[int]:
        return {number for number, _ in self.added}

    @property
    def changed_positions(self) -> set[int]:
        """Line numbers in the new file where something was added or removed."""
        return self.added_line_numbers | {number for number, _ in self.removed_lines}


def _strip_prefix(path: str) -> str:
    path = path.split("\t", 1)[0].strip()
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def parse_diff(diff: str, *, include_deleted: bool = False) -> dict[str, FileChange]:
    """Map each path in `diff` to its :class:`FileChange`.

    Deleted files have no added lines and are left out unless `include_deleted`.
    """
    changes: dict[str, FileChange] = {}
    current: FileChange | None = None
    new_line = 0
    old_path = ""
    for line in diff.splitlines():
        if line.startswith("--- "):
            old_path = _strip_prefix(line[4:])
            current = None
            continue
        if line.startswith("+++ "):
            path = _strip_prefix(line[4:])
            if path == "/dev/null":
                path = old_path
                current = FileChange(path, deleted=True)
                if include_deleted:
                    changes[path] = current
            else:
                current = changes.setdefault(path, FileChange(path))
                current.created = current.created or old_path == "/dev/null"
            continue
        match = _HUNK.match(line)
        if match:
            new_line = int(match.group(1))
            continue
        if current is None:
            continue
        if line.startswith("+"):
            current.added.append((new_line, line[1:]))
            new_line += 1
        elif line.startswith("-"):
            current.removed += 1
            current.removed_lines.append((new_line, line[1:]))
        elif line.startswith(" ") or line == "":
            new_line += 1
    return changes


def added_lines(diff: str) -> list[tuple[str, int, str]]:
    """Every added line as ``(path, line number in the new file, text)``."""
    return [
        (path, number, text)
        for path, change in parse_diff(diff).items()
        for number, text in change.added
    ]


def changed_line_count(diff: str) -> int:
    """Added plus removed lines: the size of the change."""
    changes = parse_diff(diff, include_deleted=True).values()
    return sum(len(c.added) + c.removed for c in changes)
