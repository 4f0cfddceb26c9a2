"""Refactors: behaviour stays, structure changes (the tests check both).

The structure is checked on the workspace's text, parsed with `ast` in the grader (never
imported there); the behaviour through `workspace_probe`.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    cached_space,
    draw_names,
    hidden_test,
    visible_test_path,
)
from composer_rl.tasks.templates.vocab import CONSTANTS, FUNCTIONS, MODULES


class ExtractConstant(Template):
    """Move a magic number into a named module-level constant."""

    name: ClassVar[str] = "extract_constant"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "constant")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=1528,
            heldout=392,
            value=[12, 17, 24, 31, 45],
            phrasing=("explicit", "unnamed", "refactor"),
        )
        return draw_names(self.name, choices, {"constant": CONSTANTS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, const, k = (
            params["module"],
            params["function"],
            params["constant"],
            params["value"],
        )
        path = f"{mod}.py"
        source = f"def {fn}(x):\n    return x * {k}\n"
        visible = (
            f"import inspect\n\nimport {mod}\n\n\n"
            f"def test_{fn}_keeps_its_result():\n"
            f'    assert {mod}.{fn}(2) == {2 * k}, "{fn}(2) should still be 2 * {k} = {2 * k}"\n\n\n'
            "def test_constant_is_defined():\n"
            f'    assert getattr({mod}, "{const}", None) == {k}, '
            f'"{path} should define {const} = {k} at module level"\n\n\n'
            f"def test_{fn}_uses_the_constant():\n"
            f'    assert "{k}" not in inspect.getsource({mod}.{fn}), '
            f'"{fn} should use {const}, not the literal {k}"\n'
        )
        tests = hidden_test(
            f"def test_constant_value():\n"
            f'    assert evaluate("{mod}.{const}", imports=["{mod}"]) == {k}\n\n\n'
            f"def test_{fn}_behaviour():\n"
            f'    assert call("{mod}", "{fn}", 3) == {3 * k}\n'
            f'    assert call("{mod}", "{fn}", 0) == 0\n'
            f'    assert call("{mod}", "{fn}", -1) == {-k}\n\n\n'
            "def test_the_literal_is_gone():\n"
            f'    tree = ast.parse(workspace_text("{path}"))\n'
            "    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]\n"
            f'    body = [n for n in defs if n.name == "{fn}"]\n'
            "    assert len(body) == 1\n"
            "    inside = list(ast.walk(body[0]))\n"
            f"    assert not any(isinstance(n, ast.Constant) and n.value == {k} for n in inside)\n"
            f'    assert "{const}" in {{n.id for n in inside if isinstance(n, ast.Name)}}\n'
            "    top = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets\n"
            "           if isinstance(t, ast.Name)]\n"
            f'    assert "{const}" in top\n',
            imports="import ast",
        )
        instruction = {
            "explicit": (
                f"In `{path}`, move the number {k} used by `{fn}` into a module-level "
                f"constant named `{const}` and use it."
            ),
            "unnamed": (
                f"`{fn}` multiplies by the magic number {k}. Give it a name: define a "
                f"module-level constant `{const}` and use it in `{fn}`."
            ),
            "refactor": (
                f"Refactor `{path}`: replace the literal {k} in `{fn}` with a constant "
                f"`{const}` defined at the top of the module. Behaviour must not change."
            ),
        }[params["phrasing"]]
        edit = Edit(path=path, new=f"{const} = {k}\n\n\ndef {fn}(x):\n    return x * {const}\n")
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The constant defined but the literal kept; the constant one off."""
        mod, fn, const, k = (
            params["module"],
            params["function"],
            params["constant"],
            params["value"],
        )
        path = f"{mod}.py"
        return [
            [Edit(path=path, new=f"{const} = {k}\n\n\ndef {fn}(x):\n    return x * {k}\n")],
            [Edit(path=path, new=f"{const} = {k + 1}\n\n\ndef {fn}(x):\n    return x * {const}\n")],
        ]


class RenameFunction(Template):
    """Rename a function and its one caller in another module."""

    name: ClassVar[str] = "rename_function"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "old", "new", "caller")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "old": FUNCTIONS},
            train=200,
            heldout=56,
            phrasing=("explicit", "unnamed", "tests"),
        )
        return draw_names(self.name, choices, {"new": FUNCTIONS, "caller": MODULES}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", f"{params['caller']}.py"]

    def _caller(self, params: Params, name: str) -> str:
        return f"from {params['module']} import {name}\n\n\ndef main():\n    return {name}(2, 3)\n"

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, old, new, caller = params["module"], params["old"], params["new"], params["caller"]
        path = f"{mod}.py"
        visible = (
            f"import {caller}\nimport {mod}\n\n\n"
            f"def test_{new}_is_defined():\n"
            f'    assert hasattr({mod}, "{new}"), "{path} should define {new} (the new name '
            f'of {old})"\n'
            f"    assert {mod}.{new}(1, 2) == 12\n\n\n"
            f"def test_{old}_is_gone():\n"
            f'    assert not hasattr({mod}, "{old}"), "{path} should no longer define {old}"\n\n\n'
            f"def test_{caller}_main():\n"
            f"    assert {caller}.main() == 23\n"
        )
        files = {
            path: f"def {old}(a, b):\n    return a * 10 + b\n",
            f"{caller}.py": self._caller(params, old),
            visible_test_path(mod): visible,
        }
        tests = hidden_test(
            "def test_renamed():\n"
            f'    assert call("{mod}", "{new}", 4, 5) == 45\n'
            f'    assert call("{mod}", "{new}", 0, 7) == 7\n'
            f'    assert evaluate("hasattr({mod}, \'{old}\')", imports=["{mod}"]) is False\n\n\n'
            "def test_caller_uses_the_new_name():\n"
            f'    assert call("{caller}", "main") == 23\n'
            f'    tree = ast.parse(workspace_text("{caller}.py"))\n'
            "    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}\n"
            "    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)\n"
            "             for a in n.names}\n"
            f'    assert "{old}" not in used and "{new}" in used\n',
            imports="import ast",
        )
        instruction = {
            "explicit": (
                f"Rename the function `{old}` in `{path}` to `{new}` and update its callers."
            ),
            "unnamed": (
                f"Rename the function `{old}` to `{new}` everywhere in the repository; keep "
                "no alias under the old name."
            ),
            "tests": (
                f"`{old}` in `{path}` should be called `{new}`, as the tests already expect. "
                "Rename it and update every caller."
            ),
        }[params["phrasing"]]
        edits = [
            Edit(path=path, old=f"def {old}(", new=f"def {new}("),
            Edit(path=f"{caller}.py", new=self._caller(params, new)),
        ]
        return instruction, files, tests, edits

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The definition renamed but not its caller; an alias left under the old name."""
        mod, old, new, caller = params["module"], params["old"], params["new"], params["caller"]
        path = f"{mod}.py"
        renamed = f"def {new}(a, b):\n    return a * 10 + b\n"
        return [
            [Edit(path=path, new=renamed)],
            [
                Edit(path=path, new=f"{renamed}\n\n{old} = {new}\n"),
                Edit(path=f"{caller}.py", new=self._caller(params, new)),
            ],
        ]
