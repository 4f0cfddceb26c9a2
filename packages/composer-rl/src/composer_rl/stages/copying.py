"""Synthetic pretraining documents that can only be predicted by copying names from context.

The SFT policy of 2026-12-03 learned the agent format and the behaviours of its
demonstrations but not to copy a name from the instruction into a tool call (its guess was
right at 0.40 of the names, 0.95 elsewhere: `benchmarks/name_copy.py`), and the standard
library teaches little of it in 400 steps: a name there is mostly a common word the model
can recall. These documents use invented identifiers, each defined once and used again
further on (a module named in a comment and then imported and read, a function defined and
then called, a parameter and a constant), so the only way to predict a later occurrence is
to find the earlier one: the copying that induction heads do, which small models learn
quickly from data that demands it.

The identifiers are drawn from syllables and never equal a name of the task vocabulary
(`composer_rl.tasks.templates.vocab`) of either split, so no held-out name is pretrained on.
"""

from __future__ import annotations

import random

from composer_rl.tasks.templates.vocab import CLASSES, FLAGS, POOLS

SYLLABLES = (
    "ba", "ce", "di", "fo", "gu", "ha", "je", "ki", "lo", "mu", "na", "pe", "qui", "ro",
    "su", "ta", "vi", "wo", "xa", "yu", "zo", "bri", "cla", "dro", "fle", "gra", "plo",
    "sna", "tri", "vel", "mor", "tan", "lis", "ker", "pon", "dus",
)  # fmt: skip

TASK_NAMES = frozenset(name.lower() for pool in (*POOLS.values(), FLAGS, CLASSES) for name in pool)
"""Every name the task suite uses, in either split: never drawn here."""


def identifier(rng: random.Random) -> str:
    """An invented lower-case identifier of two to four syllables, not a task name."""
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if name not in TASK_NAMES:
            return name


def copy_document(rng: random.Random) -> str:
    """One document whose later names repeat earlier ones."""
    module, function, helper, param = (identifier(rng) for _ in range(4))
    constant = identifier(rng).upper()
    value = rng.randint(2, 99)
    operator = rng.choice(["+", "-", "*"])
    lines = [
        f"# {module}.py: `{function}({param})` returns {param} {operator} {constant}.",
        f"{constant} = {value}",
        "",
        "",
        f"def {helper}({param}):",
        f"    return {param}",
        "",
        "",
        f"def {function}({param}):",
        f"    return {helper}({param}) {operator} {constant}",
        "",
        f"# tests/test_{module}.py",
        f"from {module} import {function}, {constant}",
        "",
        "",
        f"def test_{function}():",
        f"    assert {function}(1) == 1 {operator} {constant}",
        "",
        f"# read {module}.py, then edit {function} in {module}.py",
    ]
    return "\n".join(lines) + "\n"


def copy_documents(count: int, seed: int) -> list[str]:
    """`count` documents, the same for the same seed on every machine."""
    rng = random.Random(seed)
    return [copy_document(rng) for _ in range(count)]


__all__ = ["TASK_NAMES", "copy_document", "copy_documents", "identifier"]
