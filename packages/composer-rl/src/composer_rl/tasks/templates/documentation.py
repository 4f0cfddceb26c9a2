"""Documentation: add a docstring that names what it must name.

The hidden tests read the docstring from the workspace's text with `ast` (the grader
never imports the module) and the behaviour through `workspace_probe`.
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
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES, PARAMS


class AddDocstring(Template):
    """Give a function a docstring that mentions its parameter."""

    name: ClassVar[str] = "add_docstring"
    category: ClassVar[Category] = Category.DOCUMENTATION
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "param")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=608,
            heldout=160,
            factor=[2, 3, 4],
            phrasing=("explicit", "unnamed", "missing"),
        )
        return draw_names(self.name, choices, {"param": PARAMS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, p, k = params["module"], params["function"], params["param"], params["factor"]
        path = f"{mod}.py"
        header = f"def {fn}({p}):\n"
        source = f"{header}    return {p} * {k}\n"
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_has_a_docstring():\n"
            f'    assert {fn}.__doc__, "{fn} needs a docstring"\n\n\n'
            f"def test_the_docstring_mentions_{p}():\n"
            f'    assert "{p}" in ({fn}.__doc__ or ""), '
            f'"the docstring of {fn} should mention its parameter {p}"\n'
        )
        tests = hidden_test(
            "def _docstring():\n"
            f'    tree = ast.parse(workspace_text("{path}"))\n'
            "    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)\n"
            f'            and n.name == "{fn}"]\n'
            "    assert len(defs) == 1\n"
            '    return ast.get_docstring(defs[0]) or ""\n\n\n'
            f"def test_the_docstring_explains_{p}():\n"
            "    doc = _docstring()\n"
            f'    assert re.search(r"\\b{p}\\b", doc)\n'
            "    assert len(doc.split()) >= 3\n\n\n"
            f"def test_{fn}_behaves_as_before():\n"
            f'    assert call("{mod}", "{fn}", 5) == {5 * k}\n'
            f'    assert call("{mod}", "{fn}", 0) == 0\n'
            f'    assert call("{mod}", "{fn}", -2) == {-2 * k}\n',
            imports="import ast\nimport re",
        )
        instruction = {
            "explicit": (
                f"Add a docstring to `{fn}` in `{path}` that explains its parameter `{p}`."
            ),
            "unnamed": (
                f"Document `{fn}`: give it a docstring that says what its parameter `{p}` is."
            ),
            "missing": (
                f"`{fn}` in `{path}` has no docstring. Write one that mentions the "
                f"parameter `{p}` by name."
            ),
        }[params["phrasing"]]
        edit = Edit(
            path=path, old=header, new=f'{header}    """Return `{p}` multiplied by {k}."""\n'
        )
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """A comment instead of a docstring; a docstring that leaves the parameter out."""
        mod, fn, p, k = params["module"], params["function"], params["param"], params["factor"]
        header = f"def {fn}({p}):\n"
        return [
            [Edit(path=f"{mod}.py", old=header, new=f"{header}    # Return `{p}` times {k}.\n")],
            [Edit(path=f"{mod}.py", old=header, new=f'{header}    """Multiply by {k}."""\n')],
        ]
