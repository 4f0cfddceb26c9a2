"""Debugging: a function returns the wrong thing and the fix is local."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, HELPERS, MODULES

OPERATOR_PAIRS = [("+", "-"), ("-", "+"), ("*", "+"), ("+", "*"), ("*", "-"), ("-", "*")]


def _apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


class FixOperator(Template):
    """One wrong operator, named in the instruction (the tiniest task: one token to change)."""

    name: ClassVar[str] = "fix_operator"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, ops=[list(p) for p in OPERATOR_PAIRS])

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        right, wrong = params["ops"]
        path = f"{mod}.py"
        source = f"def {fn}(a, b):\n    return a {wrong} b\n"
        cases = [(7, 3), (2, 5), (10, 4)]
        checks = "".join(f"    assert {fn}({a}, {b}) == {_apply(right, a, b)}\n" for a, b in cases)
        tests = {
            f"{GRADING_DIR}/test_task.py": f"from {mod} import {fn}\n\n\ndef test_{fn}():\n{checks}"
        }
        instruction = (
            f"`{fn}(a, b)` in `{path}` should return `a {right} b` but returns "
            f"`a {wrong} b`. Fix it."
        )
        edit = Edit(path=path, old=f"return a {wrong} b", new=f"return a {right} b")
        return instruction, {path: source}, tests, [edit]


class OffByOne(Template):
    """A loop bound that stops one short; the instruction gives a failing example."""

    name: ClassVar[str] = "off_by_one"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, factor=[2, 3, 4, 5, 6])

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, k = params["module"], params["function"], params["factor"]
        path = f"{mod}.py"
        source = (
            f"def {fn}(n):\n"
            f'    """Sum of i * {k} for i from 1 to n inclusive."""\n'
            "    total = 0\n"
            "    for i in range(1, n):\n"
            f"        total += i * {k}\n"
            "    return total\n"
        )
        checks = "".join(f"    assert {fn}({n}) == {k * n * (n + 1) // 2}\n" for n in (1, 3, 10))
        tests = {
            f"{GRADING_DIR}/test_task.py": f"from {mod} import {fn}\n\n\ndef test_{fn}():\n{checks}"
        }
        instruction = (
            f"`{fn}(3)` in `{path}` should return {k * 6} but returns {k * 3}. Fix the bug."
        )
        edit = Edit(path=path, old="range(1, n)", new="range(1, n + 1)")
        return instruction, {path: source}, tests, [edit]


class CrossFileBug(Template):
    """The symptom is in one module, the bug in a helper it imports.

    Difficulty 1, not 3: the fix is the same one-token edit of `helpers.py` in every
    instance (only the names change), so it is learned by heart. The SFT policy solved all
    10 held-out instances greedy (0.94 sampled) while the real difficulty-3 templates scored
    0, and labelled 3 it made difficulty 3 look easier than difficulty 2.
    """

    name: ClassVar[str] = "cross_file_bug"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, helper=HELPERS)

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", "helpers.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, helper = params["module"], params["function"], params["helper"]
        files = {
            "helpers.py": f"def {helper}(price, qty):\n    return price + qty\n",
            f"{mod}.py": (
                f"from helpers import {helper}\n\n\n"
                f"def {fn}(items):\n    return sum({helper}(p, q) for p, q in items)\n"
            ),
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"from {mod} import {fn}\n\n\ndef test_{fn}():\n"
                f"    assert {fn}([(2, 3)]) == 6\n"
                f"    assert {fn}([(1, 4), (5, 2)]) == 14\n"
                f"    assert {fn}([]) == 0\n"
            )
        }
        instruction = (
            f"`{fn}` in `{mod}.py` returns wrong totals: `{fn}([(2, 3)])` should be 6 "
            "(price times quantity). Find and fix the bug."
        )
        edit = Edit(path="helpers.py", old="return price + qty", new="return price * qty")
        return instruction, files, tests, [edit]
