"""Where tasks come from: the built-in templates, files on disk, and plugins."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import pluggy

from composer_rl.tasks import hookspecs
from composer_rl.tasks.io import load_tasks
from composer_rl.tasks.model import Split, Task, TaskSource
from composer_rl.tasks.templates import BUILTIN_TEMPLATES, Template


class BuiltinTaskSource:
    """Every built-in template's tasks of one split."""

    name = "builtin"

    def __init__(self, templates: Sequence[Template] = BUILTIN_TEMPLATES) -> None:
        self.templates = list(templates)

    def tasks(self, split: Split) -> Iterator[Task]:
        for template in self.templates:
            yield from template.tasks(split)


class DirectoryTaskSource:
    """Tasks read by `load_tasks`; a task without a `split` in its metadata goes to `default_split`."""

    def __init__(self, name: str, path: Path, default_split: Split = Split.HELDOUT) -> None:
        self.name = name
        self.path = Path(path)
        self.default_split = default_split

    def tasks(self, split: Split) -> Iterator[Task]:
        for task in load_tasks(self.path):
            if (task.split or self.default_split.value) == split.value:
                yield task


def plugin_sources(pm: pluggy.PluginManager) -> list[TaskSource]:
    """The task sources every registered plugin contributes."""
    if not hasattr(pm.hook, "composer_task_sources"):
        pm.add_hookspecs(hookspecs)
    sources: list[TaskSource] = []
    for contributed in pm.hook.composer_task_sources():
        for source in contributed or []:
            if not isinstance(source, TaskSource):
                raise TypeError(
                    f"a composer_task_sources hook returned {source!r}, which is not a task "
                    "source (it needs a `name` and a `tasks(split)` method)"
                )
            sources.append(source)
    return sources


def collect_tasks(
    split: Split | str,
    sources: Sequence[TaskSource] | None = None,
    pm: pluggy.PluginManager | None = None,
) -> list[Task]:
    """All tasks of `split` from `sources` (default: the built-ins) plus plugin sources.

    :param pm: the job's plugin manager, whose ``composer_task_sources`` plugins add their
        sources (a job passes its `composer_rl.plugins.JobPlugins`' ``pm``); None asks no
        plugin.
    """
    split = Split(split)
    chosen = list(sources) if sources is not None else [BuiltinTaskSource()]
    if pm is not None:
        chosen += plugin_sources(pm)
    names: dict[str, TaskSource] = {}
    owner: dict[str, str] = {}
    out: list[Task] = []
    for source in chosen:
        if source.name in names:
            raise ValueError(f"two task sources are both named {source.name!r}; rename one")
        names[source.name] = source
        for task in source.tasks(split):
            if task.id in owner:
                raise ValueError(
                    f"task id {task.id!r} comes from both {owner[task.id]!r} and {source.name!r}"
                )
            owner[task.id] = source.name
            out.append(task)
    return out


def sample_tasks(tasks: Sequence[Task], per_group: int, seed: int = 0) -> list[Task]:
    """Up to `per_group` tasks per template (or per category for tasks without one),
    chosen with a seeded RNG so that evaluations compare like with like."""
    groups: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        groups[str(task.metadata.get("template", task.category.value))].append(task)
    rng = random.Random(seed)
    chosen: list[Task] = []
    for key in sorted(groups):
        group = sorted(groups[key], key=lambda t: t.id)
        chosen += rng.sample(group, min(per_group, len(group)))
    return chosen
