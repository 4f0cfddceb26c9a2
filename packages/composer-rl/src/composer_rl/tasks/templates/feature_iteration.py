"""Iterating on a feature: an existing function grows an option.

The repository's own tests (`tests/test_<module>.py`) already use the option, so they fail
until it exists and say what it should do; the hidden tests check other inputs and the
option passed by keyword.
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
from composer_rl.tasks.templates.vocab import FLAGS, FUNCTIONS, MODULES, PARAMS


class AddOffset(Template):
    """Add an optional parameter with a default that is added to the result."""

    name: ClassVar[str] = "add_offset"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "param")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=808,
            heldout=216,
            factor=[2, 3, 5, 7],
            phrasing=("explicit", "unnamed", "example"),
        )
        return draw_names(self.name, choices, {"param": PARAMS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, k, p = params["module"], params["function"], params["factor"], params["param"]
        path = f"{mod}.py"
        source = f"def {fn}(x):\n    return x * {k}\n"
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_adds_{p}():\n"
            f'    assert {fn}(4, 3) == {4 * k + 3}, "{fn}(4, 3) should be 4 * {k} + 3 = '
            f'{4 * k + 3} (the {p} is added to the result)"\n\n\n'
            f"def test_{p}_defaults_to_zero():\n"
            f'    assert {fn}(4) == {4 * k}, "{fn}(4) should stay 4 * {k} = {4 * k}: {p} '
            'defaults to 0"\n'
        )
        tests = hidden_test(
            f"def test_{fn}():\n"
            f'    assert call("{mod}", "{fn}", 2) == {2 * k}\n'
            f'    assert call("{mod}", "{fn}", 2, 5) == {2 * k + 5}\n\n\n'
            f"def test_{fn}_{p}_by_keyword():\n"
            f'    assert call("{mod}", "{fn}", 3, {p}=1) == {3 * k + 1}\n'
            f'    assert call("{mod}", "{fn}", 0, {p}=-2) == -2\n'
        )
        instruction = {
            "explicit": (
                f"Add an optional parameter `{p}` (default 0) to `{fn}` in `{path}`; "
                "it is added to the result."
            ),
            "unnamed": (
                f"`{fn}(x)` should accept an optional second argument `{p}`, 0 by default, "
                "that is added to what it returns."
            ),
            "example": (
                f"Extend `{fn}` in `{path}`: `{fn}(x, {p})` returns `x * {k} + {p}`, and "
                f"`{fn}(x)` returns what it returns today."
            ),
        }[params["phrasing"]]
        edit = Edit(
            path=path,
            old=f"def {fn}(x):\n    return x * {k}",
            new=f"def {fn}(x, {p}=0):\n    return x * {k} + {p}",
        )
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Subtracted instead of added, added before the multiplication, the wrong default."""
        mod, fn, k, p = params["module"], params["function"], params["factor"], params["param"]
        old = f"def {fn}(x):\n    return x * {k}"
        return [
            [Edit(path=f"{mod}.py", old=old, new=f"def {fn}(x, {p}=0):\n    return x * {k} - {p}")],
            [
                Edit(
                    path=f"{mod}.py",
                    old=old,
                    new=f"def {fn}(x, {p}=0):\n    return (x + {p}) * {k}",
                )
            ],
            [Edit(path=f"{mod}.py", old=old, new=f"def {fn}(x, {p}=1):\n    return x * {k} + {p}")],
        ]


SORT_WORDS = ["pear", "fig", "banana", "apple", "kiwi", "yam"]
"""The hidden tests' words."""

VISIBLE_WORDS = ["plum", "cherry", "fig", "apricot", "kiwi", "melon"]
"""The visible tests' words: others than the hidden tests', and for every `min_length`
the kept words are out of order, so a default that sorts fails them."""


class AddSortFlag(Template):
    """Add a keyword flag that changes the order of a returned list."""

    name: ClassVar[str] = "add_sort_flag"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "flag")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=476,
            heldout=100,
            min_length=[1, 2, 3],
            phrasing=("explicit", "unnamed", "example"),
        )
        return draw_names(self.name, choices, {"flag": FLAGS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def _source(self, params: Params) -> str:
        return f"def {params['function']}(words):\n    return [w for w in words if len(w) > {params['min_length']}]\n"

    def _solved(self, params: Params, tail: str, default: str = "False") -> str:
        fn, n, flag = params["function"], params["min_length"], params["flag"]
        return (
            f"def {fn}(words, {flag}={default}):\n"
            f"    result = [w for w in words if len(w) > {n}]\n"
            f"    {tail}\n"
        )

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, n, flag = (
            params["module"],
            params["function"],
            params["min_length"],
            params["flag"],
        )
        path = f"{mod}.py"
        source = self._source(params)
        seen = [w for w in VISIBLE_WORDS if len(w) > n]
        visible = (
            f"from {mod} import {fn}\n\nWORDS = {VISIBLE_WORDS!r}\n\n\n"
            f"def test_{flag}_sorts_the_kept_words():\n"
            f"    assert {fn}(WORDS, {flag}=True) == {sorted(seen)!r}, "
            f'"with {flag}=True the kept words should come back sorted"\n\n\n'
            "def test_default_keeps_the_original_order():\n"
            f"    assert {fn}(WORDS) == {seen!r}, "
            f'"without {flag}, the kept words keep their original order"\n'
        )
        kept = [w for w in SORT_WORDS if len(w) > n]
        tests = hidden_test(
            f"WORDS = {SORT_WORDS!r}\n\n\n"
            f"def test_{fn}_{flag}():\n"
            f'    assert call("{mod}", "{fn}", WORDS, {flag}=True) == {sorted(kept)!r}\n'
            f'    assert call("{mod}", "{fn}", [], {flag}=True) == []\n\n\n'
            f"def test_{fn}_default_order():\n"
            f'    assert call("{mod}", "{fn}", WORDS) == {kept!r}\n'
            f'    assert call("{mod}", "{fn}", WORDS, {flag}=False) == {kept!r}\n'
        )
        instruction = {
            "explicit": (
                f"Add a keyword argument `{flag}` (default False) to `{fn}` in `{path}`; "
                "when it is True, return the words sorted."
            ),
            "unnamed": (
                f"Give `{fn}` a keyword argument `{flag}`, False by default; with "
                f"`{flag}=True` it returns the words it keeps in alphabetical order."
            ),
            "example": (
                f"In `{path}`, `{fn}(words, {flag}=True)` should return the same words as "
                f"`{fn}(words)`, sorted. `{flag}` defaults to False."
            ),
        }[params["phrasing"]]
        new = self._solved(params, f"return sorted(result) if {flag} else result")
        files = {path: source, visible_test_path(mod): visible}
        return instruction, files, tests, [Edit(path=path, old=source, new=new)]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Sorted the wrong way, sorted in place (which returns None), sorted by default."""
        path, flag, source = f"{params['module']}.py", params["flag"], self._source(params)
        tails = [
            (f"return sorted(result, reverse=True) if {flag} else result", "False"),
            (f"return result.sort() if {flag} else result", "False"),
            (f"return sorted(result) if {flag} else result", "True"),
        ]
        return [
            [Edit(path=path, old=source, new=self._solved(params, tail, default))]
            for tail, default in tails
        ]
