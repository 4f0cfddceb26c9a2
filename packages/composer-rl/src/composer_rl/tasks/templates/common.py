"""What the templates' repositories share: where visible tests live, how hidden tests reach
workspace code, and how an oracle's edits are written (`diff_edits`: one `edit_file` a run
of changed lines, as a developer makes them, which keeps a demonstration of a change across
several files short).

Hidden tests never import the repository: they ask `workspace_probe` (copied beside them
by the grader) for plain-data values computed in a child process, so nothing the policy
wrote runs in the grader's pytest process. `hidden_test` writes that import line, naming
only the helpers a test uses.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TESTS_DIR, Edit
from composer_rl.tasks.templates.base import Params, params_key
from composer_rl.tasks.templates.vocab import name_split, names

PROBE_HELPERS: tuple[str, ...] = ("call", "evaluate", "run", "workspace_text", "WorkspaceError")
"""What `workspace_probe` offers a hidden test."""

HIDDEN_TEST_PATH = f"{GRADING_DIR}/test_task.py"


def hidden_test(body: str, *, imports: str = "") -> dict[str, str]:
    """The hidden tests of a task: `body` (test functions) after the probe's import of the
    helpers it uses, and `imports` (standard-library imports, e.g. `import ast`)."""
    used = [name for name in PROBE_HELPERS if re.search(rf"(?<![\w.]){name}\b", body)]
    header = f"from workspace_probe import {', '.join(used)}\n" if used else ""
    if imports:
        header = imports.rstrip("\n") + "\n\n" + header
    return {HIDDEN_TEST_PATH: f"{header}\n\n{body.strip()}\n"}


def visible_test_path(module: str) -> str:
    """The repository's own test file for `module`, as a developer would name it."""
    return f"{VISIBLE_TESTS_DIR}/test_{module}.py"


def stub_line(function: str) -> str:
    """The body of a function still to be written. Its message is what the repository's
    failing tests show (`--tb=line` prints one line per failure: a bare
    `NotImplementedError` would say nothing about what to do)."""
    return f'raise NotImplementedError("{function} is not written yet")'


ANSWER_FILE = "answer.txt"

ANSWER_CHECKS = """from pathlib import Path

ANSWER = Path("{answer}")


def answer():
    assert ANSWER.is_file(), "write your answer to {answer} in the repository root"
    return ANSWER.read_text()


def test_answer_is_one_line():
    lines = [line for line in answer().splitlines() if line.strip()]
    assert len(lines) == 1, "{answer} should hold just the answer, on one line"
"""
"""Visible tests of the question-answering templates: what can be checked without giving
the answer away (the file exists and holds one line); each template adds a check of the
answer's form."""


def answer_tests(extra: str) -> dict[str, str]:
    """The visible tests of a question whose answer goes in `ANSWER_FILE`."""
    text = ANSWER_CHECKS.format(answer=ANSWER_FILE) + "\n\n" + extra.strip() + "\n"
    return {f"{VISIBLE_TESTS_DIR}/test_answer.py": text}


def draw_names(
    template: str, choices: Sequence[Params], pools: Mapping[str, Sequence[str]], split_by: str
) -> list[Params]:
    """`choices` (from `named_grid`) with one more name per entry of `pools` (parameter ->
    vocabulary pool), each drawn by a hash of the choice from the names of the split of
    `choice[split_by]` that the choice does not use yet.

    `named_grid` enumerates every combination of its pools before picking, so a template
    with four names would enumerate millions of choices (minutes per `tasks()` call);
    drawing the extra names per choice keeps every name of a task in one split, spread
    over the pool, at the cost of a few combinations never being picked.
    """
    out = []
    for choice in choices:
        drawn = dict(choice)
        split = name_split(drawn[split_by])
        for key, pool in pools.items():
            taken = {v for v in drawn.values() if isinstance(v, str)}
            free = [n for n in names(pool, split) if n not in taken]
            digest = hashlib.sha256(f"{key}:{params_key(template, drawn)}".encode()).digest()
            drawn[key] = free[int.from_bytes(digest[:8], "big") % len(free)]
        out.append(drawn)
    return out


SpaceMethod = TypeVar("SpaceMethod", bound=Callable[..., list[Params]])


def cached_space(method: SpaceMethod) -> SpaceMethod:
    """`parameter_space` computed once per template class (it hashes every combination of
    its names, and `tasks()` asks for it on every call); callers get copies."""
    cache: dict[type, list[Params]] = {}

    @functools.wraps(method)
    def wrapper(self: object) -> list[Params]:
        if type(self) not in cache:
            cache[type(self)] = method(self)
        return [dict(p) for p in cache[type(self)]]

    return wrapper  # type: ignore[return-value]


def _hunks(before: list[str], after: list[str]) -> list[tuple[int, int, int, int]]:
    """(i1, i2, j1, j2) of each run of changed lines, runs one unchanged line apart merged."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    hunks: list[tuple[int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if hunks and i1 - hunks[-1][1] <= 1:
            hunks[-1] = (hunks[-1][0], i2, hunks[-1][2], j2)
        else:
            hunks.append((i1, i2, j1, j2))
    return hunks


def file_edits(path: str, before: str, after: str) -> list[Edit]:
    """The edits a developer makes to turn `before` into `after`: one `edit_file` per run
    of changed lines, each widened by unchanged lines until the text it replaces occurs
    once in the file as it stands; a whole-file write when that is shorter."""
    old_lines = before.splitlines(keepends=True)
    new_lines = after.splitlines(keepends=True)
    current = list(old_lines)
    edits: list[Edit] = []
    shift = 0
    for i1, i2, j1, j2 in _hunks(old_lines, new_lines):
        lo, hi, new = i1 + shift, i2 + shift, new_lines[j1:j2]
        text = "".join(current)
        while True:
            old = "".join(current[lo:hi])
            if old and text.count(old) == 1:
                break
            if lo > 0:
                lo, new = lo - 1, [current[lo - 1], *new]
            elif hi < len(current):
                hi, new = hi + 1, [*new, current[hi]]
            else:
                return [Edit(path=path, new=after)]
        edits.append(Edit(path=path, old=old, new="".join(new)))
        current[lo:hi] = new
        shift += len(new) - (hi - lo)
    if "".join(current) != after or sum(len(e.old or "") + len(e.new) for e in edits) > len(after):
        return [Edit(path=path, new=after)]
    return edits


def diff_edits(before: Mapping[str, str], after: Mapping[str, str]) -> list[Edit]:
    """`file_edits` for every file `after` changes or adds, in `after`'s order."""
    edits: list[Edit] = []
    for path, text in after.items():
        if path not in before:
            edits.append(Edit(path=path, new=text))
        elif before[path] != text:
            edits += file_edits(path, before[path], text)
    return edits
