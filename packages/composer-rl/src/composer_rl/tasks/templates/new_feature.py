"""New features: implement a stub, or add a function that does not exist yet."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

# description, implementation, test input, expected
LIST_OPERATIONS = {
    "sum": ("sum", "sum(xs)"),
    "largest": ("largest element", "max(xs)"),
    "smallest": ("smallest element", "min(xs)"),
    "count": ("number of elements", "len(xs)"),
    "first": ("first element", "xs[0]"),
    "last": ("last element", "xs[-1]"),
}

STRING_OPERATIONS = {
    "upper": ("`text` in upper case", "text.upper()"),
    "lower": ("`text` in lower case", "text.lower()"),
    "reversed": ("`text` reversed", "text[::-1]"),
    "stripped": ("`text` without surrounding spaces", "text.strip()"),
    "doubled": ("`text` repeated twice", "text + text"),
}


class ImplementStub(Template):
    """A documented stub raises NotImplementedError; replace it with one expression."""

    name: ClassVar[str] = "implement_stub"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, operation=list(LIST_OPERATIONS))

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["operation"]
        desc, expr = LIST_OPERATIONS[op]
        path = f"{mod}.py"
        source = (
            f'def {fn}(xs):\n    """Return the {desc} of xs."""\n    raise NotImplementedError\n'
        )
        checks = "".join(
            f"    assert {fn}({xs!r}) == {eval(expr, {'xs': xs})!r}\n"
            for xs in ([4, 9, 2], [5], [3, 1, 8, 6])
        )
        tests = {
            f"{GRADING_DIR}/test_task.py": f"from {mod} import {fn}\n\n\ndef test_{fn}():\n{checks}"
        }
        instruction = f"Implement `{fn}(xs)` in `{path}`: return the {desc} of the list `xs`."
        edit = Edit(path=path, old="raise NotImplementedError", new=f"return {expr}")
        return instruction, {path: source}, tests, [edit]


class AddStringFunction(Template):
    """Add a new function next to an existing one (the file is rewritten whole)."""

    name: ClassVar[str] = "add_string_function"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(
            module=["text_utils", "strings", "formatting", "labels"],
            function=["convert", "transform", "render", "adjust", "clean", "shape"],
            operation=list(STRING_OPERATIONS),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["operation"]
        desc, expr = STRING_OPERATIONS[op]
        path = f"{mod}.py"
        source = "def word_count(text):\n    return len(text.split())\n"
        checks = "".join(
            f"    assert {fn}({text!r}) == {eval(expr, {'text': text})!r}\n"
            for text in (" Hello World ", "abc", "Mixed Case")
        )
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"from {mod} import {fn}, word_count\n\n\ndef test_{fn}():\n{checks}"
                "    assert word_count('a b') == 2\n"
            )
        }
        instruction = f"Add a function `{fn}(text)` to `{path}` that returns {desc}."
        edit = Edit(path=path, new=f"{source}\n\ndef {fn}(text):\n    return {expr}\n")
        return instruction, {path: source}, tests, [edit]
