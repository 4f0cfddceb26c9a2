"""Names that must be copied, not recalled, and instructions that must be read (issue #29).

Every built-in template draws its names from the split vocabulary (`vocab.py`): a held-out
task uses no name a training task uses, not as a parameter and not as an identifier in
its files. The vocabulary is sane (pools disjoint, no keyword, builtin or standard-library
module name). Every template asks in at least three ways, and one of them names no file,
so that the agent has to look around.
"""

from __future__ import annotations

import ast
import builtins
import functools
import keyword
import random
import re
import sys
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, Template
from composer_rl.tasks.templates.vocab import POOLS, names

SAMPLE_PER_SPLIT = 40
"""Tasks per template and split whose files the identifier checks parse (the slow test
parses all of them)."""


def _values(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for item in value for v in _values(item)]
    return []


def _names_of(template: Template, split: Split) -> set[str]:
    """Every value of a name parameter over the template's choices of `split`."""
    return {
        v
        for params in template.parameter_space()
        if template.split(params) == split
        for key in template.name_params
        for v in _values(params.get(key))
    }


@functools.cache
def names_by_split() -> dict[Split, set[str]]:
    out: dict[Split, set[str]] = {split: set() for split in Split}
    for template in BUILTIN_TEMPLATES:
        for split in Split:
            out[split] |= _names_of(template, split)
    return out


def identifiers(files: dict[str, str]) -> set[str]:
    """The identifiers a repository's Python files define or use (names, attributes,
    functions, classes, arguments, imports, keyword arguments) and its files' stems."""
    found: set[str] = set()
    for path, text in files.items():
        found.add(PurePosixPath(path).stem)
        if not path.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
            elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
                found.add(node.arg)
            elif isinstance(node, ast.alias):
                found |= set(node.name.split(".")) | ({node.asname} if node.asname else set())
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= set(node.module.split("."))
    return found


def _sample(template: Template, split: Split, k: int | None) -> Iterable[Task]:
    """`k` tasks of `split` (all for None), seeded; only the sampled ones are built."""
    space = [p for p in template.parameter_space() if template.split(p) == split]
    if k is not None:
        space = random.Random(template.name).sample(space, min(k, len(space)))
    return (template.build(p) for p in space)


def _leaks(k: int | None) -> list[str]:
    """Tasks whose files use as an identifier a name the other split's tasks use."""
    by_split = names_by_split()
    other = {Split.TRAIN: Split.HELDOUT, Split.HELDOUT: Split.TRAIN}
    leaks = []
    for template in BUILTIN_TEMPLATES:
        for split in Split:
            for task in _sample(template, split, k):
                shared = identifiers(task.files) & by_split[other[split]]
                if shared:
                    leaks.append(f"{template.name} {split.value}: {sorted(shared)}")
    return sorted(set(leaks))


def test_every_template_declares_names_from_the_vocabulary() -> None:
    vocabulary = {name for pool in POOLS.values() for name in pool}
    for template in BUILTIN_TEMPLATES:
        assert template.name_params, f"{template.name} declares no name_params"
        used = _names_of(template, Split.TRAIN) | _names_of(template, Split.HELDOUT)
        assert used <= vocabulary, f"{template.name}: not vocabulary names {used - vocabulary}"


def test_no_task_uses_a_name_of_the_other_split_in_its_files() -> None:
    """Not only the parameters: a training module or function name (a fixed identifier
    in a template's code, a decoy) in a held-out repository would be a name to recall."""
    assert not _leaks(SAMPLE_PER_SPLIT)


@pytest.mark.slow  # every task of every template (about a minute)
def test_no_task_uses_a_name_of_the_other_split_in_its_files_all_tasks() -> None:
    assert not _leaks(None)


def test_identifiers_sees_definitions_uses_and_files() -> None:
    files = {
        "pricing.py": "from ledger import tally as t\n\n\ndef combine(a, *, rate=1):\n"
        "    return t.scale(a, gauge=rate)\n",
        "settings.json": "{}",
    }
    found = identifiers(files)
    assert {"pricing", "ledger", "tally", "t", "combine", "a", "rate", "scale", "gauge"} <= found
    assert "settings" in found


# -- the vocabulary -------------------------------------------------------------------------

FORBIDDEN = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins))
FORBIDDEN |= set(sys.stdlib_module_names) | {"pytest", "workspace_probe", "tests", "conftest"}


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_pool_names_are_valid_and_shadow_nothing(pool: str) -> None:
    words = POOLS[pool]
    assert len(set(words)) == len(words), f"{pool} repeats a name"
    for word in words:
        assert word.isidentifier(), word
        assert word not in FORBIDDEN, f"{pool}: {word} is a keyword, builtin or stdlib module"
        assert word.lower() not in sys.stdlib_module_names, word


def test_pools_are_disjoint() -> None:
    seen: dict[str, str] = {}
    for pool, words in POOLS.items():
        for word in words:
            assert word not in seen, f"{word} is in both {seen[word]} and {pool}"
            seen[word] = pool


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_every_pool_has_names_in_both_splits(pool: str) -> None:
    """A task draws distinct names of one kind (two modules, two functions), so each
    split needs at least two of every kind."""
    for split in Split:
        assert len(names(POOLS[pool], split)) >= 2, (pool, split)


# -- phrasings ------------------------------------------------------------------------------


def names_a_file(instruction: str, files: Iterable[str]) -> bool:
    """Whether `instruction` names a file of the repository: its path, its file name, or
    (for a Python module) its module name as a word."""
    for path in files:
        pure = PurePosixPath(path)
        words = [path, pure.name] + ([pure.stem] if pure.suffix == ".py" else [])
        for word in words:
            if re.search(rf"(?<![\w./]){re.escape(word)}(?![\w])", instruction):
                return True
    return False


def test_names_a_file_sees_paths_names_and_modules() -> None:
    files = ["pricing.py", "pkg/ledger.py", "settings.json"]
    assert names_a_file("Fix `pricing.py`.", files)
    assert names_a_file("In module pricing, fix it.", files)
    assert names_a_file("Edit ledger.py", files)
    assert names_a_file("The key in settings.json is wrong.", files)
    assert not names_a_file("Fix `combine` wherever it is defined.", files)
    assert not names_a_file("Write tests/test_pricing.py.", files)


def _phrasings(template: Template) -> list[Any]:
    return sorted({p["phrasing"] for p in template.parameter_space() if "phrasing" in p}, key=str)


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_every_template_asks_in_three_ways(template: Template) -> None:
    phrasings = _phrasings(template)
    assert len(phrasings) >= 3, f"{template.name} has phrasings {phrasings}"
    choice = template.parameter_space()[0]
    instructions = {template.build({**choice, "phrasing": p}).instruction for p in phrasings}
    assert len(instructions) == len(phrasings), "two phrasings read the same"


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_some_phrasing_names_no_file(template: Template) -> None:
    """Unless a template declares that every phrasing must name a file
    (`every_phrasing_names_a_file`), one phrasing leaves the agent to find it: no
    instruction in that phrasing (over a sample of both splits) names a repository file."""
    if getattr(template, "every_phrasing_names_a_file", False):
        pytest.skip(f"{template.name} declares that every phrasing names a file")
    space = template.parameter_space()
    free = []
    for phrasing in _phrasings(template):
        chosen = [p for p in space if p.get("phrasing") == phrasing]
        sample = random.Random(0).sample(chosen, min(20, len(chosen)))
        tasks = [template.build(p) for p in sample]
        if not any(names_a_file(t.instruction, t.files) for t in tasks):
            free.append(phrasing)
    assert free, f"every phrasing of {template.name} names a file of the repository"
