"""Plugins add task sources through the `composer_task_sources` hook."""

from __future__ import annotations

from collections.abc import Iterator

import pluggy
import pytest

from composer_rl.tasks import BuiltinTaskSource, Split, Task, collect_tasks, hookspecs

hookimpl = pluggy.HookimplMarker("composer")


class OneTaskSource:
    name = "one"

    def tasks(self, split: Split) -> Iterator[Task]:
        if split == Split.HELDOUT:
            yield Task(
                id="plugin-task",
                category="debugging",
                difficulty=1,
                instruction="Make f return 1.",
                files={"m.py": "def f():\n    return 0\n"},
                tests={
                    "_grading/test_m.py": "from m import f\n\ndef test_f():\n    assert f() == 1\n"
                },
            )


class Plugin:
    @hookimpl
    def composer_task_sources(self) -> list[OneTaskSource]:
        return [OneTaskSource()]


def _pm(*plugins: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("composer")
    pm.add_hookspecs(hookspecs)
    for plugin in plugins:
        pm.register(plugin)
    return pm


def test_plugin_source_adds_tasks() -> None:
    builtin = BuiltinTaskSource()
    tasks = collect_tasks(Split.HELDOUT, sources=[builtin], pm=_pm(Plugin()))
    assert tasks[-1].id == "plugin-task"
    assert len(tasks) == len(list(builtin.tasks(Split.HELDOUT))) + 1
    assert all(t.id != "plugin-task" for t in collect_tasks(Split.TRAIN, pm=_pm(Plugin())))


def test_clashing_source_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="both named 'one'"):
        collect_tasks(Split.HELDOUT, sources=[], pm=_pm(Plugin(), Plugin()))


def test_hook_returning_garbage_is_named() -> None:
    class Bad:
        @hookimpl
        def composer_task_sources(self) -> list[object]:
            return [42]

    with pytest.raises(TypeError, match="not a task source"):
        collect_tasks(Split.HELDOUT, sources=[], pm=_pm(Bad()))
