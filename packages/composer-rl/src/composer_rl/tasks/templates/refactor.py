"""Refactors: behaviour stays, structure changes (the tests check both)."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import CONSTANTS, FUNCTIONS, MODULES

NEW_NAMES = ["calculate", "evaluate", "produce", "derive"]


class ExtractConstant(Template):
    """Move a magic number into a named module-level constant."""

    name: ClassVar[str] = "extract_constant"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(
            module=MODULES, function=FUNCTIONS, constant=CONSTANTS, value=[12, 17, 24, 31, 45]
        )

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
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"import inspect\n\nimport {mod}\n\n\ndef test_{fn}():\n"
                f"    assert {mod}.{const} == {k}\n"
                f"    assert {mod}.{fn}(3) == {3 * k}\n"
                f"    assert '{k}' not in inspect.getsource({mod}.{fn})\n"
            )
        }
        instruction = (
            f"In `{path}`, move the number {k} used by `{fn}` into a module-level "
            f"constant named `{const}` and use it."
        )
        edit = Edit(path=path, new=f"{const} = {k}\n\n\ndef {fn}(x):\n    return x * {const}\n")
        return instruction, {path: source}, tests, [edit]


class RenameFunction(Template):
    """Rename a function and its one caller in another module."""

    name: ClassVar[str] = "rename_function"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, old=FUNCTIONS, new=NEW_NAMES)

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", "app.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, old, new = params["module"], params["old"], params["new"]
        path = f"{mod}.py"
        files = {
            path: f"def {old}(a, b):\n    return a * 10 + b\n",
            "app.py": f"from {mod} import {old}\n\n\ndef run():\n    return {old}(2, 3)\n",
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"import app\nimport {mod}\n\n\ndef test_rename():\n"
                f"    assert {mod}.{new}(4, 5) == 45\n"
                f"    assert not hasattr({mod}, '{old}')\n"
                "    assert app.run() == 23\n"
            )
        }
        instruction = f"Rename the function `{old}` in `{path}` to `{new}` and update its callers."
        edits = [
            Edit(path=path, old=f"def {old}(", new=f"def {new}("),
            Edit(
                path="app.py",
                new=f"from {mod} import {new}\n\n\ndef run():\n    return {new}(2, 3)\n",
            ),
        ]
        return instruction, files, tests, edits
