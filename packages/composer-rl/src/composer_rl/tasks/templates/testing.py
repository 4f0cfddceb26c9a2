"""Testing: write tests that pass on the real code and catch mutants.

The repository already has a tests folder, testing another function of the module (the
agent adds its tests there; what is there passes before and after). The hidden grader
copies every test file under `tests/` out of the workspace as text (`workspace_text`),
next to its own copy of the real module or a mutant, and runs pytest on that copy in a
fresh isolated interpreter (`workspace_probe.run`): the agent's tests never run in the
grader's process, and the module they test is the grader's, not the workspace's.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    cached_space,
    draw_names,
    hidden_test,
    visible_test_path,
)
from composer_rl.tasks.templates.debugging import _apply
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

MUTANTS = {"+": "-", "-": "+", "*": "+"}
"""The operator the grader swaps in to check that the agent's tests catch a change."""

GRADER = """ORIGINAL = {original!r}
MUTANTS = {mutants!r}


def _suite():
    listed = evaluate("sorted(os.listdir({tests!r}))", imports=["os"])
    names = [n for n in listed if re.fullmatch(r"[A-Za-z0-9_]+\\.py", n)]
    return {{n: workspace_text({tests!r} + "/" + n) for n in names}}


def _run(tmp_path, source):
    folder = tmp_path / {tests!r}
    folder.mkdir()
    for name, text in _suite().items():
        (folder / name).write_text(text)
    (tmp_path / "{module}.py").write_text(source)
    command = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", {tests!r}]
    return run(command, cwd=tmp_path).returncode


def test_the_tests_call_{function}():
    used = set()
    for text in _suite().values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.alias):
                used.add(node.name)
    assert "{function}" in used


def test_passes_on_the_real_code(tmp_path):
    assert _run(tmp_path, ORIGINAL) == 0


@pytest.mark.parametrize("mutant", range(len(MUTANTS)))
def test_fails_on_a_mutant(tmp_path, mutant):
    assert _run(tmp_path, MUTANTS[mutant]) != 0
"""


class WriteTests(Template):
    """The hidden grader runs the agent's tests against the real code and two mutants."""

    name: ClassVar[str] = "write_tests"
    category: ClassVar[Category] = Category.TESTING
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "other")
    agent_writes_tests: ClassVar[bool] = True
    """The repository's visible tests test another function and pass before and after:
    the tests this task is about are the agent's to write."""

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=162,
            heldout=30,
            op=list(MUTANTS),
            phrasing=("explicit", "unnamed", "values"),
        )
        return draw_names(self.name, choices, {"other": FUNCTIONS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", visible_test_path(params["module"])]

    def _module(self, params: Params, body: str) -> str:
        fn, other = params["function"], params["other"]
        return (
            f"def {fn}(a, b):\n    return {body}\n\n\n"
            f"def {other}(a, b):\n    return a if a > b else b\n"
        )

    def _tests(self, params: Params, extra: str = "") -> str:
        mod, fn, other = params["module"], params["function"], params["other"]
        imported = f"{fn}, {other}" if extra else other
        return (
            f"from {mod} import {imported}\n\n\n"
            f"def test_{other}():\n"
            f"    assert {other}(2, 9) == 9\n"
            f"    assert {other}(4, 1) == 4\n" + extra
        )

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["op"]
        path = f"{mod}.py"
        original = self._module(params, f"a {op} b")
        mutants = [
            self._module(params, f"a {MUTANTS[op]} b"),
            self._module(params, f"a {op} b + 1"),
        ]
        grader = GRADER.format(
            original=original, mutants=mutants, module=mod, function=fn, tests=VISIBLE_TESTS_DIR
        )
        tests = hidden_test(grader, imports="import ast\nimport re\n\nimport pytest")
        test_file = visible_test_path(mod)
        instruction = {
            "explicit": (
                f"Write pytest tests for `{fn}` in `{test_file}`: they must pass on the "
                f"current code and fail if `{fn}` computed anything else."
            ),
            "unnamed": (
                f"`{fn}` has no tests yet. Add pytest tests for it to the repository's tests; "
                "they must pass on the current code."
            ),
            "values": (
                f"Add tests for `{fn}(a, b)` in `{path}` to the tests folder, checking the "
                "values it returns; they must pass as the code is."
            ),
        }[params["phrasing"]]
        oracle = self._tests(
            params,
            f"\n\ndef test_{fn}():\n"
            f"    assert {fn}(7, 3) == {_apply(op, 7, 3)}\n"
            f"    assert {fn}(-2, 5) == {_apply(op, -2, 5)}\n",
        )
        files = {path: original, test_file: self._tests(params)}
        return instruction, files, tests, [Edit(path=test_file, new=oracle)]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """A test that expects the mutant's value (the operator misread): it fails on the
        real code."""
        fn, op = params["function"], params["op"]
        wrong = self._tests(
            params,
            f"\n\ndef test_{fn}():\n    assert {fn}(7, 3) == {_apply(MUTANTS[op], 7, 3)}\n",
        )
        return [[Edit(path=visible_test_path(params["module"]), new=wrong)]]
