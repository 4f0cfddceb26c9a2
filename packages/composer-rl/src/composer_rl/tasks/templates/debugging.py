"""Debugging: a function returns the wrong thing and the fix is local.

Each repository carries its own failing test (`tests/test_<module>.py`) whose message says
what the right value is; the hidden tests check other inputs and edge cases through
`workspace_probe`, never importing the repository.
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
from composer_rl.tasks.templates.vocab import FUNCTIONS, HELPERS, MODULES

OPERATOR_PAIRS = [("+", "-"), ("-", "+"), ("*", "+"), ("+", "*"), ("*", "-"), ("-", "*")]
"""(right, wrong): the operator the function should use and the one it uses."""

OPERATOR_VERBS = {"+": "adds", "-": "subtracts", "*": "multiplies"}

PHRASINGS = ("explicit", "symptom", "tests")
"""Three ways to ask: naming the file and the fix, describing the symptom only (no file:
the agent must find the function), and pointing at the failing tests."""


def _apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


class FixOperator(Template):
    """One wrong operator, named in the instruction (the tiniest task: one token to change)."""

    name: ClassVar[str] = "fix_operator"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=312,
            heldout=72,
            ops=[list(p) for p in OPERATOR_PAIRS],
            phrasing=PHRASINGS,
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        right, wrong = params["ops"]
        path = f"{mod}.py"
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_{OPERATOR_VERBS[right]}():\n"
            f"    assert {fn}(6, 2) == {_apply(right, 6, 2)}, "
            f'"{fn}(6, 2) should be 6 {right} 2 = {_apply(right, 6, 2)}"\n'
        )
        files = {
            path: f"def {fn}(a, b):\n    return a {wrong} b\n",
            visible_test_path(mod): visible,
        }
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {a}, {b}) == {_apply(right, a, b)}\n'
            for a, b in [(7, 3), (2, 5), (10, 4)]
        )
        edge = "".join(
            f'    assert call("{mod}", "{fn}", {a}, {b}) == {_apply(right, a, b)}\n'
            for a, b in [(0, 9), (-3, 4), (5, 5)]
        )
        tests = hidden_test(f"def test_{fn}():\n{checks}\n\ndef test_{fn}_edge_cases():\n{edge}")
        instruction = {
            "explicit": (
                f"`{fn}(a, b)` in `{path}` should return `a {right} b` but returns "
                f"`a {wrong} b`. Fix it."
            ),
            "symptom": (
                f"`{fn}(a, b)` should return `a {right} b`, but it computes `a {wrong} b`. "
                "Find where it is defined and fix it."
            ),
            "tests": (
                f"The tests fail because `{fn}` in `{path}` does not return `a {right} b`. "
                "Fix the function so that they pass."
            ),
        }[params["phrasing"]]
        edit = Edit(path=path, old=f"return a {wrong} b", new=f"return a {right} b")
        return instruction, files, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The third operator (neither the right one nor the bug), and for `-` the operands
        the wrong way round."""
        right, wrong = params["ops"]
        path = f"{params['module']}.py"
        old = f"return a {wrong} b"
        (third,) = {"+", "-", "*"} - {right, wrong}
        attempts = [[Edit(path=path, old=old, new=f"return a {third} b")]]
        if right == "-":
            attempts.append([Edit(path=path, old=old, new="return b - a")])
        return attempts


class OffByOne(Template):
    """A loop bound that stops one short; the instruction gives a failing example."""

    name: ClassVar[str] = "off_by_one"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=248,
            heldout=72,
            factor=[2, 3, 4, 5, 6],
            phrasing=PHRASINGS,
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, k = params["module"], params["function"], params["factor"]
        path = f"{mod}.py"
        source = (
            f"def {fn}(n):\n"
            f'    """Sum of i * {k} for i from 1 to n inclusive."""\n'
            "    acc = 0\n"
            "    for i in range(1, n):\n"
            f"        acc += i * {k}\n"
            "    return acc\n"
        )
        spelled = " + ".join(f"{k}*{i}" for i in range(1, 5))
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_includes_n():\n"
            f'    assert {fn}(4) == {10 * k}, "{fn}(4) should be {spelled} = {10 * k} '
            '(n itself is included)"\n\n\n'
            f"def test_{fn}_of_one():\n"
            f'    assert {fn}(1) == {k}, "{fn}(1) should be {k}*1 = {k}"\n'
        )
        files = {path: source, visible_test_path(mod): visible}

        def total(n: int) -> int:
            return k * n * (n + 1) // 2

        checks = "".join(f'    assert call("{mod}", "{fn}", {n}) == {total(n)}\n' for n in (3, 10))
        edge = "".join(f'    assert call("{mod}", "{fn}", {n}) == {total(n)}\n' for n in (0, 2))
        tests = hidden_test(f"def test_{fn}():\n{checks}\n\ndef test_{fn}_small_n():\n{edge}")
        instruction = {
            "explicit": (
                f"`{fn}(3)` in `{path}` should return {6 * k} but returns {3 * k}. Fix the bug."
            ),
            "symptom": (
                f"`{fn}(n)` should add up i * {k} for i from 1 to n inclusive, but it leaves "
                "out n. Find the function and fix it."
            ),
            "tests": (
                f"The tests of `{path}` fail: `{fn}` stops one step short. Fix it so that "
                "they pass."
            ),
        }[params["phrasing"]]
        edit = Edit(path=path, old="range(1, n)", new="range(1, n + 1)")
        return instruction, files, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The bound moved the other way, or off by one the other side."""
        path = f"{params['module']}.py"
        return [
            [Edit(path=path, old="range(1, n)", new="range(0, n)")],
            [Edit(path=path, old="range(1, n)", new="range(1, n + 2)")],
        ]


class CrossFileBug(Template):
    """The symptom is in one module, the bug in a helper it imports from another.

    Difficulty 1, not 3: the fix is the same one-token edit of the helper in every
    instance (only the names change). The SFT policy solved all 10 held-out instances
    greedy (0.94 sampled) while the real difficulty-3 templates scored 0, and labelled 3 it
    made difficulty 3 look easier than difficulty 2.
    """

    name: ClassVar[str] = "cross_file_bug"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "helper", "helper_module")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=196,
            heldout=60,
            phrasing=("explicit", "symptom", "direct"),
        )
        return draw_names(
            self.name, choices, {"helper": HELPERS, "helper_module": MODULES}, "module"
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", f"{params['helper_module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, helper, hmod = (
            params["module"],
            params["function"],
            params["helper"],
            params["helper_module"],
        )
        visible = (
            f"from {hmod} import {helper}\nfrom {mod} import {fn}\n\n\n"
            f"def test_{fn}_multiplies_price_by_quantity():\n"
            f'    assert {fn}([(3, 4)]) == 12, "{fn}([(3, 4)]) should be 3 * 4 = 12 (price '
            'times quantity)"\n\n\n'
            f"def test_{helper}():\n"
            f'    assert {helper}(5, 2) == 10, "{helper}(5, 2) should be 5 * 2 = 10"\n'
        )
        files = {
            f"{hmod}.py": (
                f"def {helper}(each, qty):\n"
                '    """The cost of `qty` pieces at `each` apiece."""\n'
                "    return each + qty\n"
            ),
            f"{mod}.py": (
                f"from {hmod} import {helper}\n\n\n"
                f"def {fn}(items):\n    return sum({helper}(p, q) for p, q in items)\n"
            ),
            visible_test_path(mod): visible,
        }
        tests = hidden_test(
            f"def test_{fn}():\n"
            f'    assert call("{mod}", "{fn}", [(2, 3)]) == 6\n'
            f'    assert call("{mod}", "{fn}", [(1, 4), (5, 2)]) == 14\n\n\n'
            f"def test_{fn}_edge_cases():\n"
            f'    assert call("{mod}", "{fn}", []) == 0\n'
            f'    assert call("{mod}", "{fn}", [(0, 7)]) == 0\n\n\n'
            f"def test_{helper}():\n"
            f'    assert call("{hmod}", "{helper}", 6, 7) == 42\n'
            f'    assert call("{hmod}", "{helper}", 1, 9) == 9\n'
        )
        instruction = {
            "explicit": (
                f"`{fn}` in `{mod}.py` returns wrong totals: `{fn}([(2, 3)])` should be 6 "
                "(price times quantity). Find and fix the bug."
            ),
            "symptom": (
                f"`{fn}([(2, 3)])` returns 5 but should return 6: each (price, quantity) pair "
                "should cost price times quantity. Find the bug and fix it."
            ),
            "direct": (
                f"`{helper}` in `{hmod}.py` adds its two arguments where it should multiply "
                f"them, so `{fn}` returns wrong totals. Fix it."
            ),
        }[params["phrasing"]]
        edit = Edit(path=f"{hmod}.py", old="return each + qty", new="return each * qty")
        return instruction, files, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The wrong file (the symptom's module patched around the helper), and the other
        operator."""
        mod, helper, hmod = params["module"], params["helper"], params["helper_module"]
        return [
            [
                Edit(
                    path=f"{mod}.py",
                    old=f"return sum({helper}(p, q) for p, q in items)",
                    new="return sum(p * q for p, q in items)",
                )
            ],
            [Edit(path=f"{hmod}.py", old="return each + qty", new="return each - qty")],
        ]
