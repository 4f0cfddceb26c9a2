"""Minimal pairs: the same repository, instructions that differ in the one word that decides
the answer ("first" / "last" / "smallest" / "largest", "above" / "below").

A policy that does well on other templates without reading their instructions closely
(the file and the function give the fix away) does no better than chance here: every
member of a pair has the same files, visible tests included, so only the instruction's
deciding word tells the answers apart, and the hidden tests tell every word from every
other. In the training split every choice of names comes with every deciding word, and
the tasks of one choice carry the same `metadata["pair"]`; the names decide the split, so
a pair never straddles it. The held-out split gets one deciding word per choice of names
(by hash), as any other task: it measures the template, not the pairing.

The visible tests are the same for every member, so they check only what every member
shares (the function exists, its result has the right form): they fail on the stub, pass
on every member's solution, and never give the deciding word away.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

from composer_rl.tasks.model import Category, Edit, Split, Task
from composer_rl.tasks.templates.base import Params, Template, named_grid, params_key
from composer_rl.tasks.templates.common import (
    cached_space,
    hidden_test,
    stub_line,
    visible_test_path,
)
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

PAIR_KEY = "pair"
"""The metadata key naming a training task's minimal-pair group."""


class PairedTemplate(Template):
    """A template with a `which` axis (the deciding word) that is expanded whole in the
    training split and drawn once per choice of names in the held-out split."""

    words: ClassVar[tuple[str, ...]]
    groups_train: ClassVar[int]
    groups_heldout: ClassVar[int]
    phrasings: ClassVar[tuple[str, ...]] = ("explicit", "unnamed", "short")

    @cached_space
    def parameter_space(self) -> list[Params]:
        groups = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=self.groups_train,
            heldout=self.groups_heldout,
            phrasing=self.phrasings,
        )
        space: list[Params] = []
        for group in groups:
            if self.split(group) == Split.TRAIN:
                space += [{**group, "which": word} for word in self.words]
            else:
                digest = hashlib.sha256(params_key(self.name, group).encode()).digest()
                space.append({**group, "which": self.words[digest[0] % len(self.words)]})
        return space

    def pair_of(self, params: Params) -> str | None:
        """The group a training task's pair is named by (its parameters but the word)."""
        if self.split(params) != Split.TRAIN:
            return None
        rest = sorted((k, v) for k, v in params.items() if k != "which")
        return "/".join([self.name, *(f"{k}={v}" for k, v in rest)])

    def build(self, params: Params, split: Split | None = None) -> Task:
        task = super().build(params, split)
        pair = self.pair_of(params)
        if pair is not None:
            task.metadata[PAIR_KEY] = pair
        return task

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]


PICKS = {
    "first": "xs[0]",
    "last": "xs[-1]",
    "smallest": "min(xs)",
    "largest": "max(xs)",
}
"""The deciding word and the expression that answers it."""

PICK_LISTS: list[list[int]] = [[4, 9, 2, 7], [3, 1, 8, 6], [5], [-2, -7, 0]]
"""The hidden tests' lists: on the first two, every word gives a different item."""


class PickItem(PairedTemplate):
    """Implement a stub that returns one item of a list: which one, only the instruction
    says."""

    name: ClassVar[str] = "pick_item"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")
    words: ClassVar[tuple[str, ...]] = tuple(PICKS)
    groups_train: ClassVar[int] = 75
    groups_heldout: ClassVar[int] = 60

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, which = params["module"], params["function"], params["which"]
        path = f"{mod}.py"
        source = (
            f'def {fn}(xs):\n    """One item of the non-empty list `xs`."""\n    {stub_line(fn)}\n'
        )
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_of_one_item():\n"
            f'    assert {fn}([8]) == 8, "{fn}([8]) should be 8: a list of one item gives '
            'that item"\n\n\n'
            f"def test_{fn}_returns_an_item():\n"
            "    xs = [4, 11, 1, 7]\n"
            f'    assert {fn}(xs) in xs, "{fn}(xs) should return one of the items of xs"\n'
        )
        expr = PICKS[which]
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {xs!r}) == {eval(expr, {}, {"xs": xs})!r}\n'
            for xs in PICK_LISTS
        )
        tests = hidden_test(f"def test_{fn}_returns_the_{which}_item():\n{checks}")
        instruction = {
            "explicit": (
                f"Implement `{fn}(xs)` in `{path}`: return the {which} item of the list `xs`."
            ),
            "unnamed": f"`{fn}(xs)` is still a stub. Make it return the {which} item of `xs`.",
            "short": f"In `{path}`, `{fn}(xs)` should return the {which} element of `xs`.",
        }[params["phrasing"]]
        edit = Edit(path=path, old=stub_line(fn), new=f"return {expr}")
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The list itself instead of an item; the second item for the first. (The other
        deciding word passes the visible tests, which are every member's: only the hidden
        tests tell it, so it is no attempt a failing run could correct.)"""
        path, fn = f"{params['module']}.py", params["function"]
        return [
            [Edit(path=path, old=stub_line(fn), new="return xs")],
            [Edit(path=path, old=stub_line(fn), new="return xs[1]")],
        ]


KEEPS = {"above": ">", "below": "<"}


class KeepItems(PairedTemplate):
    """Narrow a function that returns every item to the items above (or below) a limit."""

    name: ClassVar[str] = "keep_items"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")
    words: ClassVar[tuple[str, ...]] = tuple(KEEPS)
    groups_train: ClassVar[int] = 100
    groups_heldout: ClassVar[int] = 50

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, which = params["module"], params["function"], params["which"]
        path = f"{mod}.py"
        old = "return list(xs)"
        source = (
            f"def {fn}(xs, limit):\n"
            '    """The items of `xs` kept by comparing them with `limit`, in their order."""\n'
            f"    {old}\n"
        )
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_leaves_out_the_limit_itself():\n"
            f'    assert {fn}([5, 5, 5], 5) == [], "{fn}([5, 5, 5], 5) should be []: an item '
            'equal to the limit is neither above nor below it"\n\n\n'
            f"def test_{fn}_keeps_some_items():\n"
            f'    assert len({fn}([2, 9, 4, 7], 5)) == 2, "{fn}([2, 9, 4, 7], 5) should keep '
            'two of the four items"\n'
        )
        op = KEEPS[which]

        def kept(xs: list[int], limit: int) -> list[int]:
            return [x for x in xs if (x > limit if op == ">" else x < limit)]

        cases = [([1, 8, 3, 10, 4], 4), ([10, 1, 8], 5), ([-3, 0, 3], 0), ([], 2)]
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {xs!r}, {limit}) == {kept(xs, limit)!r}\n'
            for xs, limit in cases
        )
        tests = hidden_test(f"def test_{fn}_keeps_the_items_{which}_the_limit():\n{checks}")
        instruction = {
            "explicit": (
                f"Change `{fn}(xs, limit)` in `{path}` so that it returns only the items of "
                f"`xs` strictly {which} `limit`, in their order."
            ),
            "unnamed": (
                f"`{fn}(xs, limit)` returns every item of `xs`; make it keep only the items "
                f"strictly {which} `limit`, in order."
            ),
            "short": f"`{fn}` in `{path}` should keep the items {which} `limit` and drop the rest.",
        }[params["phrasing"]]
        edit = Edit(path=path, old=old, new=f"return [x for x in xs if x {op} limit]")
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The limit itself kept (the bound off by one)."""
        op = KEEPS[params["which"]]
        return [
            [
                Edit(
                    path=f"{params['module']}.py",
                    old="return list(xs)",
                    new=f"return [x for x in xs if x {op}= limit]",
                )
            ]
        ]
