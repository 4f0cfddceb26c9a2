"""Training tasks re-rendered with invented names: demonstrations only copying gets right.

The SFT policy of 2026-12-03 guessed the first token of a name it had just read right at
0.40 (0.95 elsewhere, `benchmarks/name_copy.py`): with every training name seen in dozens
of demonstrations, recalling a name that often goes with the words around it is cheaper
to learn than copying it, and a held-out task, whose names no training task uses, then
fails at its first path. A training task's template rendered again with names made up for
it (syllables, never a name of the task vocabulary of either split) gives a demonstration
in which recall cannot help: the name was never seen before this context. Everything else
(the template, its other parameters, the oracle, the hidden tests) is the training task's,
so no held-out task, name or parameter is touched.
"""

from __future__ import annotations

import builtins
import keyword
import random
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from composer_rl.tasks.model import Split, Task
from composer_rl.tasks.templates import BUILTIN_TEMPLATES, Template
from composer_rl.tasks.templates.base import name_values
from composer_rl.tasks.templates.vocab import CLASSES, FLAGS, POOLS, name_split

SYLLABLES = (
    "ba", "ce", "di", "fo", "gu", "ha", "je", "ki", "lo", "mu", "na", "pe", "qui", "ro",
    "su", "ta", "vi", "wo", "xa", "yu", "zo", "bri", "cla", "dro", "fle", "gra", "plo",
    "sna", "tri", "vel", "mor", "tan", "lis", "ker", "pon", "dus",
)  # fmt: skip

TASK_NAMES = frozenset(name.lower() for pool in (*POOLS.values(), FLAGS, CLASSES) for name in pool)
"""Every name the task suite uses, in either split: never invented."""

_RESERVED = frozenset(
    {*keyword.kwlist, *dir(builtins), *sys.stdlib_module_names, "test", "tests", "app"}
)


def invented_name(rng: random.Random) -> str:
    """A lower-case identifier of two to four syllables that no task, keyword, builtin or
    standard-library module uses."""
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if name not in TASK_NAMES and name not in _RESERVED:
            return name


def _styled_like(original: str, name: str) -> str:
    """`name` in the case of `original`: constants upper, classes capitalized."""
    if original.isupper():
        return name.upper()
    if original[:1].isupper():
        return name.capitalize()
    return name


def _renamed(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return mapping[value]
    if isinstance(value, list | tuple):
        return type(value)(_renamed(item, mapping) for item in value)
    return value


TEMPLATES_BY_NAME: Mapping[str, Template] = {t.name: t for t in BUILTIN_TEMPLATES}


def with_invented_names(task: Task, rng: random.Random) -> Task | None:
    """`task` rendered again with each of its names (`Template.name_params`) replaced by an
    invented one, the same name by the same everywhere; None for a task of no built-in
    template, with no names, or whose template looks its names up in the vocabulary while
    rendering (it cannot take a name the vocabulary lacks). The task is of the training split whatever the invented
    names would hash to (`metadata["names"] == "invented"`)."""
    template = TEMPLATES_BY_NAME.get(str(task.metadata.get("template")))
    if template is None or not template.name_params or task.split != Split.TRAIN.value:
        return None
    params = dict(task.metadata["params"])
    originals = sorted({n for key in template.name_params for n in name_values(params.get(key))})
    if not originals:
        return None
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for original in originals:
        # Template names hash into a split one by one, and a task's names must share one
        # (`split_of`): an invented name is drawn again until it hashes to training.
        name = _styled_like(original, invented_name(rng))
        while name in taken or name_split(name) != Split.TRAIN:
            name = _styled_like(original, invented_name(rng))
        taken.add(name)
        mapping[original] = name
    for key in template.name_params:
        if key in params:
            params[key] = _renamed(params[key], mapping)
    try:
        invented = template.build(params, split=Split.TRAIN)
    except (ValueError, KeyError, IndexError):
        return None  # the template derives more names from the vocabulary (fix_ci's package)
    invented.metadata["names"] = "invented"
    invented.metadata["renamed_from"] = task.id
    return invented


def invented_name_tasks(tasks: Sequence[Task], count: int, seed: int) -> list[Task]:
    """`count` tasks, each one of `tasks` (drawn in turn from a seeded shuffle) rendered with
    invented names; the same for the same arguments on every machine."""
    rng = random.Random(seed)
    order = [t for t in tasks if TEMPLATES_BY_NAME.get(str(t.metadata.get("template")))]
    rng.shuffle(order)
    chosen: list[Task] = []
    for index in range(len(order) * 2):
        if len(chosen) >= count or not order:
            break
        invented = with_invented_names(order[index % len(order)], rng)
        if invented is not None:
            chosen.append(invented)
    return chosen


__all__ = [
    "SYLLABLES",
    "TASK_NAMES",
    "invented_name",
    "invented_name_tasks",
    "with_invented_names",
]
