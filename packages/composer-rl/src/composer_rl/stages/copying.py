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

The identifiers are `composer_rl.tasks.invented.invented_name`'s: syllables, never a name of
the task vocabulary of either split, so no held-out name is pretrained on.
"""

from __future__ import annotations

import random

from composer_rl.tasks.invented import invented_name


def copy_document(rng: random.Random) -> str:
    """One document whose later names repeat earlier ones."""
    module, function, helper, param = (invented_name(rng) for _ in range(4))
    constant = invented_name(rng).upper()
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


__all__ = ["copy_document", "copy_documents"]
