"""How big a task is: the lines its oracle changes and the length of its description.

These are the two axes on which the report separates CursorBench from public benchmarks
(a median of 181 changed lines against 7-10 for SWE-bench; descriptions of 390 characters
against 1,185-3,055). Changed lines count added plus removed lines of the unified diff
between the repository and the oracle's end state, as `git diff --numstat` does.
"""

from __future__ import annotations

import difflib
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from composer_rl.tasks.model import Task


def changed_lines(before: Mapping[str, str], after: Mapping[str, str]) -> int:
    """Added plus removed lines between two repository states (files created or deleted
    count all their lines)."""
    total = 0
    for path in set(before) | set(after):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        matcher = difflib.SequenceMatcher(
            None, (old or "").splitlines(), (new or "").splitlines(), autojunk=False
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                total += (i2 - i1) + (j2 - j1)
    return total


def files_changed(before: Mapping[str, str], after: Mapping[str, str]) -> int:
    return sum(1 for p in set(before) | set(after) if before.get(p) != after.get(p))


class TaskSize(BaseModel):
    """The size of one task's change and description."""

    changed_lines: int
    files_changed: int
    description_chars: int


def task_size(task: Task) -> TaskSize:
    """Read from the task's metadata when its template recorded it, else computed from the
    oracle (a task whose oracle does not apply counts 0 changed lines)."""
    meta = task.metadata
    if all(k in meta for k in ("changed_lines", "files_changed")):
        return TaskSize(
            changed_lines=int(meta["changed_lines"]),
            files_changed=int(meta["files_changed"]),
            description_chars=len(task.instruction),
        )
    try:
        after = task.solved_files()
    except ValueError:
        after = dict(task.files)
    return TaskSize(
        changed_lines=changed_lines(task.files, after),
        files_changed=files_changed(task.files, after),
        description_chars=len(task.instruction),
    )


class SizeMedians(BaseModel):
    tasks: int
    changed_lines: float
    files_changed: float
    description_chars: float


def medians(tasks: Iterable[Task]) -> SizeMedians:
    sizes = [task_size(t) for t in tasks]
    if not sizes:
        return SizeMedians(tasks=0, changed_lines=0, files_changed=0, description_chars=0)
    return SizeMedians(
        tasks=len(sizes),
        changed_lines=statistics.median(s.changed_lines for s in sizes),
        files_changed=statistics.median(s.files_changed for s in sizes),
        description_chars=statistics.median(s.description_chars for s in sizes),
    )


def medians_by_category(tasks: Iterable[Task]) -> dict[str, SizeMedians]:
    groups: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        groups[task.category.value].append(task)
    return {name: medians(group) for name, group in groups.items()}
