from __future__ import annotations

import difflib
from typing import Any

import pluggy
import pytest

from composer_rewards import PROJECT, Episode, hookspecs


def change(before: dict[str, str], after: dict[str, str], **fields: Any) -> Episode:
    """An episode whose workspace went from `before` to `after` (path -> content).

    The diff is a real unified diff (difflib, with git's a/ b/ prefixes), so the rewards
    read exactly what they would read from the sandbox.
    """
    diff = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        diff.extend(
            difflib.unified_diff(
                (old or "").splitlines(keepends=True),
                (new or "").splitlines(keepends=True),
                fromfile=f"a/{path}" if old is not None else "/dev/null",
                tofile=f"b/{path}" if new is not None else "/dev/null",
            )
        )
    changed = {
        p: after.get(p) for p in before.keys() | after.keys() if before.get(p) != after.get(p)
    }
    fields.setdefault("task", "fix the bug")
    return Episode(diff="".join(diff), changed_files=changed, **fields)


@pytest.fixture
def pm() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager
