"""Understanding a codebase: answer a question about it in `answer.txt`.

The visible tests check what can be checked without giving the answer away: the answer
file exists, holds one line, and has the answer's form (a number, a file of the
repository). The hidden tests read it as data (`workspace_text`) and compare it.
Every name in a repository, decoys included, is of the task's split.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import ANSWER_FILE, answer_tests, cached_space, hidden_test
from composer_rl.tasks.templates.vocab import CONSTANTS, FUNCTIONS, MODULES, name_split, names

NUMBER_CHECK = f'''def test_answer_is_a_number():
    text = answer().strip()
    assert text.lstrip("-").isdigit(), (
        "{ANSWER_FILE} should hold just the number, such as 7: not a sentence or an assignment"
    )
'''

FILE_CHECK = f'''def test_answer_names_a_python_file_of_the_repository():
    name = answer().strip()
    assert name.endswith(".py") and Path(name).is_file(), (
        "{ANSWER_FILE} should hold the name of a Python file of this repository, such as name.py"
    )
'''


def _same_split(pool: tuple[str, ...], name: str) -> list[str]:
    """The other names of `pool` in `name`'s split, starting after `name` (so decoys
    differ between tasks and never come from the other split)."""
    ours = list(names(pool, name_split(name)))
    at = ours.index(name) if name in ours else 0
    return [n for n in ours[at + 1 :] + ours[:at] if n != name]


class ReadConstant(Template):
    """Look up a constant's value in a module full of constants."""

    name: ClassVar[str] = "read_constant"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "constant")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "constant": CONSTANTS},
            train=276,
            heldout=60,
            value=[3, 8, 15, 42, 64, 100, 256],
            phrasing=("explicit", "unnamed", "lookup"),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, const, value = params["module"], params["constant"], params["value"]
        path = f"{mod}.py"
        others = _same_split(CONSTANTS, const)[:3]
        lines = [f"{c} = {value + 7 * (i + 1)}" for i, c in enumerate(others)]
        lines.insert(len(mod) % (len(lines) + 1), f"{const} = {value}")
        files = {path: "\n".join(lines) + "\n", **answer_tests(NUMBER_CHECK)}
        tests = hidden_test(
            "def test_answer():\n"
            f'    assert workspace_text("{ANSWER_FILE}").strip() == "{value}"\n\n\n'
            "def test_the_constant_is_unchanged():\n"
            f'    assert evaluate("{mod}.{const}", imports=["{mod}"]) == {value}\n'
        )
        instruction = {
            "explicit": (
                f"What is the value of `{const}` in `{path}`? Write just the value to "
                f"`{ANSWER_FILE}`."
            ),
            "unnamed": (
                f"A constant `{const}` is defined somewhere in this repository. Write its "
                f"value, and nothing else, to `{ANSWER_FILE}`."
            ),
            "lookup": (
                f"Look up `{const}` in `{path}` and write the number alone to a new file "
                f"`{ANSWER_FILE}`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, [Edit(path=ANSWER_FILE, new=f"{value}\n")]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The whole assignment, or a sentence, instead of the value alone."""
        const, value = params["constant"], params["value"]
        return [
            [Edit(path=ANSWER_FILE, new=f"{const} = {value}\n")],
            [Edit(path=ANSWER_FILE, new=f"The value of {const} is {value}.\n")],
        ]


class FindDefinition(Template):
    """Which of several modules defines a given function."""

    name: ClassVar[str] = "find_definition"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("function", "module")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"function": FUNCTIONS, "module": MODULES},
            train=208,
            heldout=48,
            decoys=[0, 1, 2, 3],
            phrasing=("explicit", "search", "grep"),
        )

    def _modules(self, params: Params) -> list[str]:
        """The defining module and two decoys of its split, in the order a reader lists
        them."""
        start = params["decoys"]
        decoys = _same_split(MODULES, params["module"])[start : start + 2]
        return sorted([params["module"], *decoys])

    def context_files(self, params: Params) -> list[str]:
        modules = self._modules(params)
        return [f"{m}.py" for m in modules[: modules.index(params["module"]) + 1]]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        fn, mod = params["function"], params["module"]
        fillers = iter(_same_split(FUNCTIONS, fn))
        files = {}
        for m in self._modules(params):
            name = fn if m == mod else next(fillers)
            files[f"{m}.py"] = f"def {name}(x):\n    return x + 1\n"
        files.update(answer_tests(FILE_CHECK))
        tests = hidden_test(
            "def test_answer():\n"
            f'    assert workspace_text("{ANSWER_FILE}").strip() == "{mod}.py"\n'
        )
        instruction = {
            "explicit": (
                f"Which file defines the function `{fn}`? Write just the file name to "
                f"`{ANSWER_FILE}`."
            ),
            "search": (
                f"Find the module where `{fn}` is defined and write its file name (such as "
                f"`name.py`), nothing else, to `{ANSWER_FILE}`."
            ),
            "grep": (
                f"Exactly one file of this repository contains `def {fn}(`. Write that "
                f"file's name alone to `{ANSWER_FILE}`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, [Edit(path=ANSWER_FILE, new=f"{mod}.py\n")]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The module's name without its extension, or the function's name."""
        return [
            [Edit(path=ANSWER_FILE, new=f"{params['module']}\n")],
            [Edit(path=ANSWER_FILE, new=f"{params['function']}\n")],
        ]
