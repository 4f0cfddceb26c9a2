"""Optimisation: a slow function made faster, graded by tests plus a bound on a counted cost.

The cost is always counted, never timed: calls of a function the grader wraps, or queries
a store object counts itself. A counted cost is the same on every machine and under any
load, so the grade cannot flake (DESIGN.md: tests never assert wall-clock times).
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

# (base values f(0), f(1)); f(n) = f(n - 1) + f(n - 2)
BASES = [(0, 1), (2, 1), (1, 1), (3, 2)]


def _sequence(a: int, b: int, n: int) -> int:
    for _ in range(n):
        a, b = b, a + b
    return a


MEMO_TESTS = """import {mod}

ORIGINAL = {mod}.{fn}


def test_values():
    assert [{mod}.{fn}(n) for n in range(8)] == {values!r}


def test_calls_are_linear():
    calls = 0

    def counted(n):
        nonlocal calls
        calls += 1
        return ORIGINAL(n)

    {mod}.{fn} = counted
    try:
        assert counted(25) == {n25!r}
    finally:
        {mod}.{fn} = ORIGINAL
    assert calls <= 60, f"{fn}(25) made {{calls}} calls of {fn}; at most 60 allowed"
    assert {mod}.{fn}(60) == {big!r}
"""


class MemoizeRecursion(Template):
    """A doubly recursive sequence: keep the values, bound the number of calls."""

    name: ClassVar[str] = "memoize_recursion"
    category: ClassVar[Category] = Category.OPTIMISATION
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, base=list(range(len(BASES))))

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        a, b = BASES[params["base"]]
        path = f"{mod}.py"
        body = (
            f"    if n == 0:\n        return {a}\n    if n == 1:\n        return {b}\n"
            f"    return {fn}(n - 1) + {fn}(n - 2)\n"
        )
        source = f'def {fn}(n):\n    """f(0) = {a}, f(1) = {b}, f(n) = f(n-1) + f(n-2)."""\n{body}'
        tests = {
            f"{GRADING_DIR}/test_task.py": MEMO_TESTS.format(
                mod=mod,
                fn=fn,
                values=[_sequence(a, b, n) for n in range(8)],
                big=_sequence(a, b, 60),
                n25=_sequence(a, b, 25),
            )
        }
        instruction = f"`{fn}` in `{path}` is exponential. Make it linear."
        fast = (
            f"    a, b = {a}, {b}\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
        )
        return instruction, {path: source}, tests, [Edit(path=path, old=body, new=fast)]


STORE = '''class Store:
    """Rows by key. Every call of `get` or `get_many` is one query, counted in `queries`."""

    def __init__(self, rows):
        self._rows = dict(rows)
        self.queries = 0

    def get(self, key):
        """One query: the row of `key`."""
        self.queries += 1
        return self._rows[key]

    def get_many(self, keys):
        """One query: {key: row} for every key in `keys`."""
        self.queries += 1
        return {key: self._rows[key] for key in keys}
'''

TOTALS_SLOW = '''def order_total(store, keys):
    """Sum of {price} * qty over the rows of `keys`."""
    total = 0
    for key in keys:
        row = store.get(key)
        total += row["{price}"] * row["qty"]
    return total
'''
TOTALS_FAST = '''def order_total(store, keys):
    """Sum of {price} * qty over the rows of `keys`."""
    rows = store.get_many(keys)
    total = 0
    for key in keys:
        row = rows[key]
        total += row["{price}"] * row["qty"]
    return total
'''
LABELS_SLOW = '''def labels(store, keys):
    """'name x qty' for each key, in order."""
    out = []
    for key in keys:
        name = store.get(key)["name"]
        qty = store.get(key)["qty"]
        out.append(f"{name} x {qty}")
    return out
'''
LABELS_FAST = '''def labels(store, keys):
    """'name x qty' for each key, in order."""
    rows = store.get_many(keys)
    out = []
    for key in keys:
        row = rows[key]
        out.append(f"{row['name']} x {row['qty']}")
    return out
'''
REPORT_SLOW = '''from labels import labels
from totals import order_total


def {fn}(store, keys):
    """The order's lines and its total."""
    lines = labels(store, keys)
    return lines + [f"total {{order_total(store, keys)}}"]
'''
REPORT_FAST = '''def {fn}(store, keys):
    """The order's lines and its total."""
    rows = store.get_many(keys)
    lines = [f"{{rows[k]['name']}} x {{rows[k]['qty']}}" for k in keys]
    total = sum(rows[k]["{price}"] * rows[k]["qty"] for k in keys)
    return lines + [f"total {{total}}"]
'''

BATCH_TESTS = """import pytest

from labels import labels
from store import Store
from totals import order_total
from {mod} import {fn}

ROWS = {{
    "a": {{"name": "pen", "{price}": 3, "qty": 2}},
    "b": {{"name": "ink", "{price}": 5, "qty": 1}},
    "c": {{"name": "pad", "{price}": 4, "qty": 3}},
}}
KEYS = ["a", "b", "c", "a"]


@pytest.mark.parametrize(
    "call, expected",
    [
        (order_total, 29),
        (labels, ["pen x 2", "ink x 1", "pad x 3", "pen x 2"]),
        ({fn}, ["pen x 2", "ink x 1", "pad x 3", "pen x 2", "total 29"]),
    ],
)
def test_same_answers_in_one_query(call, expected):
    store = Store(ROWS)
    assert call(store, KEYS) == expected
    assert store.queries <= 1, f"{{call.__name__}} made {{store.queries}} queries; at most 1"
"""


class BatchQueries(Template):
    """Three modules query a store once per key; batch them to one query per call."""

    name: ClassVar[str] = "batch_queries"
    category: ClassVar[Category] = Category.OPTIMISATION
    difficulty: ClassVar[int] = 3

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, price=["price", "cost", "unit_price"])

    def context_files(self, params: Params) -> list[str]:
        return ["store.py", "totals.py", "labels.py", f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, price = params["module"], params["function"], params["price"]
        files = {
            "store.py": STORE,
            "totals.py": TOTALS_SLOW.replace("{price}", price),
            "labels.py": LABELS_SLOW,
            f"{mod}.py": REPORT_SLOW.format(fn=fn),
        }
        tests = {f"{GRADING_DIR}/test_task.py": BATCH_TESTS.format(mod=mod, fn=fn, price=price)}
        instruction = (
            f"`order_total`, `labels` and `{fn}` ({mod}.py) query the store once per key. "
            "Make each call at most one query."
        )
        edits = [
            Edit(path="totals.py", new=TOTALS_FAST.replace("{price}", price)),
            Edit(path="labels.py", new=LABELS_FAST),
            Edit(path=f"{mod}.py", new=REPORT_FAST.format(fn=fn, price=price)),
        ]
        return instruction, files, tests, edits
