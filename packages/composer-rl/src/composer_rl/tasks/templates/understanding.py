"""Understanding a codebase: answer a question about it in `answer.txt`."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import CONSTANTS, FUNCTIONS, MODULES

ANSWER_TEST = (
    "from pathlib import Path\n\n\ndef test_answer():\n"
    "    assert Path('answer.txt').read_text().strip() == {expected!r}\n"
)


class ReadConstant(Template):
    """Look up a constant's value in a module full of constants."""

    name: ClassVar[str] = "read_constant"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, constant=CONSTANTS, value=[3, 8, 15, 42, 64, 100, 256])

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, const, value = params["module"], params["constant"], params["value"]
        path = f"{mod}.py"
        others = [c for c in CONSTANTS if c != const][:3]
        lines = [f"{c} = {value + 7 * (i + 1)}" for i, c in enumerate(others)]
        lines.insert(len(params["module"]) % 4, f"{const} = {value}")
        files = {path: "\n".join(lines) + "\n"}
        tests = {f"{GRADING_DIR}/test_task.py": ANSWER_TEST.format(expected=str(value))}
        instruction = (
            f"What is the value of `{const}` in `{path}`? Write just the value to `answer.txt`."
        )
        return instruction, files, tests, [Edit(path="answer.txt", new=f"{value}\n")]


class FindDefinition(Template):
    """Which of several modules defines a given function."""

    name: ClassVar[str] = "find_definition"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(function=FUNCTIONS, module=MODULES, decoys=[0, 1, 2, 3])

    def _modules(self, params: Params) -> list[str]:
        """The defining module and two decoys, in the order a reader lists them."""
        others = [m for m in MODULES if m != params["module"]]
        start = params["decoys"]
        return sorted([params["module"], *others[start : start + 2]])

    def context_files(self, params: Params) -> list[str]:
        modules = self._modules(params)
        return [f"{m}.py" for m in modules[: modules.index(params["module"]) + 1]]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        fn, mod = params["function"], params["module"]
        fillers = iter(f for f in FUNCTIONS if f != fn)
        files = {}
        for m in self._modules(params):
            name = fn if m == mod else next(fillers)
            files[f"{m}.py"] = f"def {name}(x):\n    return x + 1\n"
        tests = {f"{GRADING_DIR}/test_task.py": ANSWER_TEST.format(expected=f"{mod}.py")}
        instruction = (
            f"Which file defines the function `{fn}`? Write just the file name to `answer.txt`."
        )
        return instruction, files, tests, [Edit(path="answer.txt", new=f"{mod}.py\n")]
