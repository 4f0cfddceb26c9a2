"""Wrong first edits and unfinished work, made from a task's oracle edits.

The recovering demonstrations open with a mistake that people make on that kind of task:
the other operator, the bound off the other way, the first element for the last, `min` for
`max`, `True` for `False`, a number one off. They are made generically, as mutations of the
oracle's `Edit.new` (`mutations`), after the ones a template knows for its own tasks
(`Template.wrong_edits`, or a task's `metadata["wrong_edits"]` for tasks read from disk),
which can say what no token swap can (the wrong file). A mutation is only a candidate: the
demonstration uses it only if the visible tests fail after it, which the caller checks in a
sandbox, so no recovering demonstration "fixes" an edit the tests cannot tell from right.

A fourth source is the policy itself (`"policy"`): the SFT policy's own failed episodes on
training tasks, each turned into the edits from the original repository to its final one
(`corrections`), for stage one's second SFT round (`composer_rl.agent.own_mistakes`).

`line_edit` turns any two states of a file into the smallest unique `edit_file` between
them, which is how the correction after a failing run is written (one line, as a developer
would fix it, not the whole file again), and how a TODO comment joins the fix (`with_todo`).
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal

from composer_rl.tasks.model import VISIBLE_TESTS_DIR, Edit, Task

if TYPE_CHECKING:
    from composer_rl.tasks.templates.base import Template

AttemptSource = Literal["template", "task", "mutation", "policy"]
"""Where a wrong attempt comes from: a template's `wrong_edits`, a task's
`metadata["wrong_edits"]`, a generic mutation, or the policy's own failed episode."""


@dataclass(frozen=True)
class WrongAttempt:
    """A first attempt: edits of the original repository that leave the task unsolved."""

    edits: tuple[Edit, ...]
    source: AttemptSource
    what: str
    """What the mistake is, for the record (e.g. "`-` for `+` in mathops.py")."""


@dataclass(frozen=True)
class Rule:
    """A token-level mistake: where `pattern` matches in an edit's new text, each of
    `replace(match)` is tried in its place. Tier 0 rules are the mistakes named first (an
    operator, a bound, an index, a builtin); tier 1 (a number one off) comes after."""

    name: str
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], list[str]]
    tier: int = 0
    python_only: bool = True


def _to(*options: str) -> Callable[[re.Match[str]], list[str]]:
    return lambda match: [match.expand(o) for o in options]


def _one_off(match: re.Match[str]) -> list[str]:
    value = int(match.group(0))
    return [str(value + 1)] + ([str(value - 1)] if value > 0 else [])


def _rule(name: str, pattern: str, *options: str, tier: int = 0) -> Rule:
    return Rule(name, re.compile(pattern), _to(*options), tier)


SPACED = r"(?<= ){}(?= )"

AGGREGATES = ("sum", "min", "max", "len")


def _other_aggregates(match: re.Match[str]) -> list[str]:
    name, arg = match.group(1), match.group(2)
    others = [f"{other}({arg})" for other in AGGREGATES if other != name]
    return [*others, f"{arg}[0]", f"{arg}[-1]"]


RULES: tuple[Rule, ...] = (
    _rule("operator", SPACED.format(r"\+"), "-", "*"),
    _rule("operator", SPACED.format("-"), "+", "*"),
    _rule("operator", SPACED.format(r"\*"), "+", "-", "/"),
    _rule("operator", SPACED.format("/"), "*", "//"),
    _rule("operator", SPACED.format("//"), "/", "*"),
    _rule("operator", SPACED.format(r"\+="), "-="),
    _rule("operator", SPACED.format("-="), "+="),
    _rule("operator", SPACED.format(r"\*="), "+="),
    _rule("comparison", SPACED.format("<"), "<="),
    _rule("comparison", SPACED.format("<="), "<"),
    _rule("comparison", SPACED.format(">"), ">="),
    _rule("comparison", SPACED.format(">="), ">"),
    _rule("comparison", SPACED.format("=="), "!="),
    _rule("comparison", SPACED.format("!="), "=="),
    _rule("bound", r"\b(\w+) \+ 1\b", r"\1", r"\1 - 1"),
    _rule("bound", r"\b(\w+) - 1\b", r"\1", r"\1 + 1"),
    _rule("index", r"\b(\w+)\[0\]", r"\1[-1]", r"min(\1)"),
    _rule("index", r"\b(\w+)\[-1\]", r"\1[0]", r"max(\1)"),
    _rule("index", r"\[1:\]", "[:-1]", "[:]"),
    _rule("index", r"\[:-1\]", "[1:]", "[:]"),
    Rule("aggregate", re.compile(r"\b(sum|min|max|len)\((\w+)\)"), _other_aggregates),
    _rule("builtin", r"\bmin\(", "max("),
    _rule("builtin", r"\bmax\(", "min("),
    _rule("builtin", r"\bany\(", "all("),
    _rule("builtin", r"\ball\(", "any("),
    _rule("builtin", r"\.upper\(\)", ".lower()"),
    _rule("builtin", r"\.lower\(\)", ".upper()"),
    _rule("builtin", r"\.strip\(\)", ".rstrip()", ".lstrip()"),
    _rule("builtin", r"\.startswith\(", ".endswith("),
    _rule("builtin", r"\.endswith\(", ".startswith("),
    _rule("boolean", r"\bTrue\b", "False"),
    _rule("boolean", r"\bFalse\b", "True"),
    _rule("logic", SPACED.format("and"), "or"),
    _rule("logic", SPACED.format("or"), "and"),
    _rule("logic", r"\bis not None\b", "is None"),
    _rule("logic", r"\bis None\b", "is not None"),
    Rule("json", re.compile(r"\btrue\b"), _to("false"), python_only=False),
    Rule("json", re.compile(r"\bfalse\b"), _to("true"), python_only=False),
    Rule("number", re.compile(r"(?<![\w.])\d+(?![\w.])"), _one_off, tier=1, python_only=False),
)
"""The generic token-level mistakes, in the order issue #29 names them (the wrong file is
`_wrong_files`)."""

_TRIPLE = re.compile(r"(\"\"\"|''').*?\1", re.DOTALL)


def _in_string_or_comment(text: str, pos: int, triple: list[tuple[int, int]]) -> bool:
    """Whether `pos` of Python text is inside a string literal or a comment (a mutation
    there changes no behaviour a test could see, or changes a message, not the code)."""
    if any(a <= pos < b for a, b in triple):
        return True
    start = text.rfind("\n", 0, pos) + 1
    quote: str | None = None
    for char in text[start:pos]:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#":
            return True
    return quote is not None


def _wrong_files(text: str, paths: Sequence[str]) -> Iterator[tuple[int, str, str]]:
    """The wrong file: where a text that is not code names a repository file (an answer,
    a review's `path:line`), each other file of the same kind in its place."""
    for path in paths:
        for match in re.finditer(rf"(?<![\w/.-]){re.escape(path)}(?![\w/-])", text):
            for other in paths:
                if other != path and PurePosixPath(other).suffix == PurePosixPath(path).suffix:
                    mutated = text[: match.start()] + other + text[match.end() :]
                    yield 0, mutated, f"`{other}` for `{path}`"


def _mutated_texts(
    text: str, python: bool, paths: Sequence[str] = ()
) -> Iterator[tuple[int, str, str]]:
    """(tier, mutated text, what changed) for every rule match in `text`, and for every
    repository file a non-Python text names (`paths`)."""
    if not python:
        yield from _wrong_files(text, paths)
    triple = [m.span() for m in _TRIPLE.finditer(text)] if python else []
    for rule in RULES:
        if rule.python_only and not python:
            continue
        for match in rule.pattern.finditer(text):
            if python and _in_string_or_comment(text, match.start(), triple):
                continue
            for replacement in rule.replace(match):
                if replacement == match.group(0):
                    continue
                mutated = text[: match.start()] + replacement + text[match.end() :]
                yield rule.tier, mutated, f"`{replacement}` for `{match.group(0)}`"


def apply_edits(files: dict[str, str], edits: Sequence[Edit]) -> dict[str, str] | None:
    """The repository after `edits`, or None when one of them does not apply."""
    try:
        for edit in edits:
            files = edit.apply(files)
    except ValueError:
        return None
    return files


def mutations(task: Task, rng: random.Random | None = None) -> list[WrongAttempt]:
    """Every generic wrong attempt at `task`: the oracle's edits with one of them mutated.

    Each leaves a repository that differs from the solved one and creates no file the
    solution does not (the tools cannot delete it again). Tier 0 mistakes come first, each
    tier shuffled by `rng` (None: in rule order), one attempt per distinct end state."""
    solved = task.solved_files()
    sources = sorted(p for p in task.files if not p.startswith(VISIBLE_TESTS_DIR + "/"))
    tiers: dict[int, list[WrongAttempt]] = {}
    seen: set[tuple[tuple[str, str], ...]] = set()
    for index, edit in enumerate(task.solution):
        python = edit.path.endswith(".py")
        for tier, new, what in _mutated_texts(edit.new, python, sources):
            if new == edit.old:
                continue  # the edit would undo nothing: not a first attempt
            edits = list(task.solution)
            edits[index] = Edit(path=edit.path, old=edit.old, new=new)
            after = apply_edits(dict(task.files), edits)
            if after is None or after == solved or set(after) - set(solved):
                continue
            key = tuple(sorted(after.items()))
            if key in seen:
                continue
            seen.add(key)
            tiers.setdefault(tier, []).append(
                WrongAttempt(tuple(edits), "mutation", f"{what} in {edit.path}")
            )
    ordered: list[WrongAttempt] = []
    for tier in sorted(tiers):
        group = tiers[tier]
        if rng is not None:
            rng.shuffle(group)
        ordered += group
    return ordered


def declared_attempts(
    task: Task, templates: Sequence[Template] | None = None
) -> list[WrongAttempt]:
    """The wrong attempts a task declares: its template's `wrong_edits(params)` (the
    template found by name among `templates`, default the built-in ones) and
    `metadata["wrong_edits"]` (lists of `Edit` records, for tasks from disk)."""
    attempts: list[WrongAttempt] = []
    if "template" in task.metadata and "params" in task.metadata:
        if templates is None:
            from composer_rl.tasks.templates import BUILTIN_TEMPLATES

            templates = BUILTIN_TEMPLATES
        template = next((t for t in templates if t.name == task.metadata["template"]), None)
        if template is not None:
            for edits in template.wrong_edits(dict(task.metadata["params"])):
                attempts.append(WrongAttempt(tuple(edits), "template", template.name))
    for raw in task.metadata.get("wrong_edits", []):
        declared = tuple(Edit.model_validate(e) for e in raw)
        attempts.append(WrongAttempt(declared, "task", "metadata"))
    return attempts


def wrong_attempts(
    task: Task, rng: random.Random | None = None, templates: Sequence[Template] | None = None
) -> list[WrongAttempt]:
    """The candidates for a task's wrong first attempt, best first: declared ones, then
    the generic mutations. Declared ones that do not apply, that solve, or that create a
    file the solution lacks are dropped."""
    solved = task.solved_files()
    declared = []
    for attempt in declared_attempts(task, templates):
        after = apply_edits(dict(task.files), attempt.edits)
        if after is not None and after != solved and not set(after) - set(solved):
            declared.append(attempt)
    return declared + mutations(task, rng)


def _trimmed(edit: Edit, before: str, after: str) -> Edit:
    """`edit` without the indentation and final newline its two sides share, as the oracle
    writes its edits (`return a - b`, not the whole indented line), when that is still
    unique and still gives `after`."""
    old, new = edit.old or "", edit.new
    indent = old[: len(old) - len(old.lstrip(" \t"))]
    if not new.startswith(indent) or not (old.endswith("\n") and new.endswith("\n")):
        return edit
    short_old, short_new = old[len(indent) : -1], new[len(indent) : -1]
    if (
        short_old.strip()
        and before.count(short_old) == 1
        and before.replace(short_old, short_new, 1) == after
    ):
        return Edit(path=edit.path, old=short_old, new=short_new)
    return edit


def line_edit(path: str, before: str, after: str) -> Edit:
    """The smallest `edit_file` that turns `before` into `after`: the lines that differ,
    widened by context lines until the text it replaces occurs once. A whole-file write
    when no such range exists (e.g. the file is one repeated line)."""
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi_a, hi_b = head, len(a) - tail, len(b) - tail
    while True:
        old = "".join(a[lo:hi_a])
        if old and before.count(old) == 1:
            return _trimmed(Edit(path=path, old=old, new="".join(b[lo:hi_b])), before, after)
        if lo == 0 and hi_a == len(a):
            return Edit(path=path, new=after)
        if lo > 0:
            lo -= 1
        if hi_a < len(a):
            hi_a, hi_b = hi_a + 1, hi_b + 1


def corrections(current: dict[str, str], target: dict[str, str]) -> list[Edit] | None:
    """Edits that turn the repository `current` into `target` (a line edit per changed file,
    a write per missing one), or None when `current` has a file `target` lacks."""
    if set(current) - set(target):
        return None
    edits = []
    for path in sorted(target):
        if path not in current:
            edits.append(Edit(path=path, new=target[path]))
        elif current[path] != target[path]:
            edits.append(line_edit(path, current[path], target[path]))
    return edits


TODO_NOTES: tuple[str, ...] = (
    "TODO: handle the edge cases",
    "TODO: add a test for this",
    "TODO: tidy this up",
    "TODO: double-check this",
)
"""Notes of the kind composer-rewards' `unfinished` reward flags (a TODO marker the diff
added)."""


def _same_code(a: str, b: str) -> bool:
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except SyntaxError:
        return False


def with_todo(task: Task, rng: random.Random) -> tuple[list[Edit], str] | None:
    """The oracle's edits with a TODO comment added to the first Python file they change,
    above the first line the fix changes, and the note; None when no Python file is edited
    exactly once or no line takes a comment without changing the code. The comment leaves
    the code (its AST) exactly as the fix has it, so the task is still solved."""
    note = rng.choice(TODO_NOTES)
    counts: dict[str, int] = {}
    for edit in task.solution:
        counts[edit.path] = counts.get(edit.path, 0) + 1
    for index, edit in enumerate(task.solution):
        if not edit.path.endswith(".py") or counts[edit.path] != 1:
            continue
        before = task.files.get(edit.path, "")
        after = edit.apply({edit.path: before})[edit.path] if edit.old is not None else edit.new
        a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        for line in range(min(first, len(b)), len(b)):
            indent = b[line][: len(b[line]) - len(b[line].lstrip())]
            if not b[line].strip():
                continue
            marked = "".join(b[:line]) + f"{indent}# {note}\n" + "".join(b[line:])
            if _same_code(marked, after):
                replacement = (
                    Edit(path=edit.path, new=marked)
                    if edit.old is None
                    else line_edit(edit.path, before, marked)
                )
                edits = list(task.solution)
                edits[index] = replacement
                return edits, note
    return None
