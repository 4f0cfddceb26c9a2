"""Documentation: add a docstring that names what it must name."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES, PARAMS


class AddDocstring(Template):
    """Give a function a docstring that mentions its parameter."""

    name: ClassVar[str] = "add_docstring"
    category: ClassVar[Category] = Category.DOCUMENTATION
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, param=PARAMS, factor=[2, 3, 4])

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, p, k = params["module"], params["function"], params["param"], params["factor"]
        path = f"{mod}.py"
        header = f"def {fn}({p}):\n"
        source = f"{header}    return {p} * {k}\n"
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"from {mod} import {fn}\n\n\ndef test_docstring():\n"
                f"    assert {fn}.__doc__ and '{p}' in {fn}.__doc__\n"
                f"    assert {fn}(5) == {5 * k}\n"
            )
        }
        instruction = f"Add a docstring to `{fn}` in `{path}` that explains its parameter `{p}`."
        edit = Edit(
            path=path,
            old=header,
            new=f'{header}    """Return `{p}` multiplied by {k}."""\n',
        )
        return instruction, {path: source}, tests, [edit]
