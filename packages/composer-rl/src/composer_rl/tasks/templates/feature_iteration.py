"""Iterating on a feature: an existing function grows an option."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES


class AddOffset(Template):
    """Add an optional parameter with a default that is added to the result."""

    name: ClassVar[str] = "add_offset"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(
            module=MODULES,
            function=FUNCTIONS,
            factor=[2, 3, 5, 7],
            param=["offset", "bias", "shift", "extra"],
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, k, p = params["module"], params["function"], params["factor"], params["param"]
        path = f"{mod}.py"
        source = f"def {fn}(x):\n    return x * {k}\n"
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"from {mod} import {fn}\n\n\ndef test_{fn}():\n"
                f"    assert {fn}(2) == {2 * k}\n"
                f"    assert {fn}(2, 5) == {2 * k + 5}\n"
                f"    assert {fn}(3, {p}=1) == {3 * k + 1}\n"
            )
        }
        instruction = (
            f"Add an optional parameter `{p}` (default 0) to `{fn}` in `{path}`; "
            "it is added to the result."
        )
        edit = Edit(
            path=path,
            old=f"def {fn}(x):\n    return x * {k}",
            new=f"def {fn}(x, {p}=0):\n    return x * {k} + {p}",
        )
        return instruction, {path: source}, tests, [edit]


class AddSortFlag(Template):
    """Add a keyword flag that changes the order of a returned list."""

    name: ClassVar[str] = "add_sort_flag"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(
            module=MODULES,
            function=FUNCTIONS,
            min_length=[1, 2, 3],
            flag=["ordered", "sort", "sorted_output"],
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, n, flag = (
            params["module"],
            params["function"],
            params["min_length"],
            params["flag"],
        )
        path = f"{mod}.py"
        source = f"def {fn}(words):\n    return [w for w in words if len(w) > {n}]\n"
        words = ["pear", "fig", "banana", "apple", "kiwi", "yam"]
        kept = [w for w in words if len(w) > n]
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"from {mod} import {fn}\n\nWORDS = {words!r}\n\n\ndef test_{fn}():\n"
                f"    assert {fn}(WORDS) == {kept!r}\n"
                f"    assert {fn}(WORDS, {flag}=True) == {sorted(kept)!r}\n"
                f"    assert {fn}(WORDS, {flag}=False) == {kept!r}\n"
            )
        }
        instruction = (
            f"Add a keyword argument `{flag}` (default False) to `{fn}` in `{path}`; "
            "when it is True, return the words sorted."
        )
        edit = Edit(
            path=path,
            old=source,
            new=(
                f"def {fn}(words, {flag}=False):\n"
                f"    result = [w for w in words if len(w) > {n}]\n"
                f"    return sorted(result) if {flag} else result\n"
            ),
        )
        return instruction, {path: source}, tests, [edit]
