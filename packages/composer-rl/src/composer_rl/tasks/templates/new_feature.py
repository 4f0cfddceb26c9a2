"""New features: implement a stub, or add a function that does not exist yet.

The repository's tests already call the new code (and fail until it exists, saying what
they expected); the hidden tests check other inputs through `workspace_probe`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from composer_rl.tasks.model import Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    cached_space,
    hidden_test,
    stub_line,
    visible_test_path,
)
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

LIST_OPERATIONS = {
    "sum": ("sum", "sum(xs)"),
    "largest": ("largest element", "max(xs)"),
    "smallest": ("smallest element", "min(xs)"),
    "count": ("number of elements", "len(xs)"),
    "first": ("first element", "xs[0]"),
    "last": ("last element", "xs[-1]"),
}
"""operation: (what the docstring calls it, the expression that computes it)."""

LIST_MISTAKES = {
    "sum": ["len(xs)"],
    "largest": ["min(xs)", "xs[-1]"],
    "smallest": ["max(xs)", "xs[0]"],
    "count": ["sum(xs)"],
    "first": ["xs[-1]", "xs[1]"],
    "last": ["xs[0]", "xs[-2]"],
}
"""Plausible wrong expressions per operation: the opposite one, the element at the wrong
end, the first element for the smallest."""

VISIBLE_LIST = [5, 9, 2, 6]
"""The visible test's list: every operation gives a different value on it, so every
mistake above fails the visible test."""

HIDDEN_LISTS: list[list[int]] = [[4, 9, 2], [5], [3, 1, 8, 6], [-2, -7]]

STRING_OPERATIONS = {
    "upper": ("`text` in upper case", "text.upper()"),
    "lower": ("`text` in lower case", "text.lower()"),
    "reversed": ("`text` reversed", "text[::-1]"),
    "stripped": ("`text` without surrounding spaces", "text.strip()"),
    "doubled": ("`text` repeated twice", "text + text"),
}

STRING_MISTAKES = {
    "upper": "text.lower()",
    "lower": "text.upper()",
    "reversed": "reversed(text)",
    "stripped": "text.lstrip()",
    "doubled": 'text + " " + text',
}

VISIBLE_TEXT = "  Big Sky "
HIDDEN_TEXTS = (" Hello World ", "abc", "Mixed Case", "")


def _value(expr: str, **names: Any) -> Any:
    return eval(expr, {}, names)  # the templates' own fixed expressions, never task input


class ImplementStub(Template):
    """A documented stub raises NotImplementedError; replace it with one expression."""

    name: ClassVar[str] = "implement_stub"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=304,
            heldout=80,
            operation=list(LIST_OPERATIONS),
            phrasing=("explicit", "unnamed", "docstring"),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["operation"]
        desc, expr = LIST_OPERATIONS[op]
        path = f"{mod}.py"
        source = f'def {fn}(xs):\n    """Return the {desc} of xs."""\n    {stub_line(fn)}\n'
        value = _value(expr, xs=VISIBLE_LIST)
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}():\n"
            f"    assert {fn}({VISIBLE_LIST!r}) == {value!r}, "
            f'"{fn}({VISIBLE_LIST!r}) should be the {desc}: {value!r}"\n'
        )
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {xs!r}) == {_value(expr, xs=xs)!r}\n'
            for xs in HIDDEN_LISTS
        )
        tests = hidden_test(f"def test_{fn}():\n{checks}")
        instruction = {
            "explicit": f"Implement `{fn}(xs)` in `{path}`: return the {desc} of the list `xs`.",
            "unnamed": (
                f"`{fn}(xs)` is a stub that raises NotImplementedError. Make it return the "
                f"{desc} of the list `xs`."
            ),
            "docstring": f"Implement the stub `{fn}` in `{path}` as its docstring says.",
        }[params["phrasing"]]
        edit = Edit(path=path, old=stub_line(fn), new=f"return {expr}")
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        path, fn = f"{params['module']}.py", params["function"]
        return [
            [Edit(path=path, old=stub_line(fn), new=f"return {wrong}")]
            for wrong in LIST_MISTAKES[params["operation"]]
        ]


class AddStringFunction(Template):
    """Add a new function next to an existing one (the file is rewritten whole)."""

    name: ClassVar[str] = "add_string_function"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=96,
            heldout=24,
            operation=list(STRING_OPERATIONS),
            phrasing=("explicit", "unnamed", "tests"),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def _with(self, params: Params, expr: str) -> str:
        return f"{SOURCE}\n\ndef {params['function']}(text):\n    return {expr}\n"

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["operation"]
        desc, expr = STRING_OPERATIONS[op]
        path = f"{mod}.py"
        value = _value(expr, text=VISIBLE_TEXT)
        visible = (
            f"import {mod}\n\n\n"
            "def test_word_count():\n"
            f'    assert {mod}.word_count("one two three") == 3\n\n\n'
            f"def test_{fn}():\n"
            f'    assert hasattr({mod}, "{fn}"), "{path} should define a function {fn}(text)"\n'
            f"    assert {mod}.{fn}({VISIBLE_TEXT!r}) == {value!r}, "
            f'"{fn}({VISIBLE_TEXT!r}) should be {desc}: {value!r}"\n'
        )
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {text!r}) == {_value(expr, text=text)!r}\n'
            for text in HIDDEN_TEXTS
        )
        tests = hidden_test(
            f"def test_{fn}():\n{checks}\n\n"
            "def test_word_count_still_works():\n"
            f'    assert call("{mod}", "word_count", "a b") == 2\n'
        )
        instruction = {
            "explicit": f"Add a function `{fn}(text)` to `{path}` that returns {desc}.",
            "unnamed": f"Next to `word_count`, add a function `{fn}(text)` that returns {desc}.",
            "tests": (
                f"The tests of `{path}` expect a function `{fn}(text)` that returns {desc}. Add it."
            ),
        }[params["phrasing"]]
        edit = Edit(path=path, new=self._with(params, expr))
        return instruction, {path: SOURCE, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        path = f"{params['module']}.py"
        return [[Edit(path=path, new=self._with(params, STRING_MISTAKES[params["operation"]]))]]


SOURCE = "def word_count(text):\n    return len(text.split())\n"
"""The module `add_string_function` adds to."""
