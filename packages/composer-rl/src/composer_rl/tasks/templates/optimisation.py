"""Optimisation: a slow function made faster, graded by tests plus a bound on a counted cost.

The cost is always counted, never timed: calls of a function the grader wraps, queries a
store object counts itself, or the rows a list visits and the comparisons of ids it holds
(`index_lookups`: a list of ids the code builds itself is still counted). A counted cost is the same on every machine and under any
load, so the grade cannot flake (DESIGN.md: tests never assert wall-clock times).

The count is taken inside the probe's child (`evaluate(..., setup=...)`): the hidden test's
own setup code wraps the function or builds the store there, on inputs the instruction does
not give, and only the count and the values come back, as plain data. Workspace code could
lie about its own values, as it could about any result, but no constant satisfies the
checks: the values are of inputs it never saw, and a function that is still slow cannot
answer the large input within the probe's time limit.
"""

from __future__ import annotations

from typing import Any, ClassVar

from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import diff_edits
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

PHRASINGS = (0, 1, 2)

# (base values f(0), f(1)); f(n) = f(n - 1) + f(n - 2)
BASES = [(0, 1), (2, 1), (1, 1), (3, 2)]


def _sequence(a: int, b: int, n: int) -> int:
    for _ in range(n):
        a, b = b, a + b
    return a


COUNT_SETUP = """import {mod}
ORIGINAL = {mod}.{fn}
calls = 0
def counted(*args, **kwargs):
    global calls
    calls += 1
    return ORIGINAL(*args, **kwargs)
{mod}.{fn} = counted
try:
    result = counted({n})
finally:
    {mod}.{fn} = ORIGINAL
"""
"""Wraps the module's function so that every call through its name (the recursion's too)
is counted, in the child; `(result, calls)` comes back."""

MEMO_TESTS = """from workspace_probe import call, evaluate

SETUP = {setup!r}


def test_values():
    assert [call({mod!r}, {fn!r}, n) for n in range(8)] == {values!r}
    assert call({mod!r}, {fn!r}, 25) == {n25!r}


def test_calls_are_linear():
    result, calls = evaluate("(result, calls)", imports=[{mod!r}], setup=SETUP)
    assert result == {counted!r}
    assert calls <= {bound}, f"{fn}({n}) made {{calls}} calls of {fn}; at most {bound} allowed"
    # Only a linear function answers this within the probe's time limit.
    assert call({mod!r}, {fn!r}, 90) == {big!r}
"""

MEMO_VISIBLE = '''"""Values of {fn} and how many calls it makes."""

import {mod}


def test_values():
    for n, expected in {values!r}:
        assert {mod}.{fn}(n) == expected, f"{fn}({{n}}) should be {{expected}}"


def test_calls_are_linear(monkeypatch):
    original = {mod}.{fn}
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr({mod}, "{fn}", counted)
    assert counted({n}) == {expected!r}
    assert len(calls) <= {bound}, (
        f"{fn}({n}) made {{len(calls)}} calls of {fn}; a linear version makes at most {bound}"
    )
'''


class MemoizeRecursion(Template):
    """A doubly recursive sequence: keep the values, bound the number of calls."""

    name: ClassVar[str] = "memoize_recursion"
    category: ClassVar[Category] = Category.OPTIMISATION
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=200,
            heldout=60,
            base=list(range(len(BASES))),
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def _body(self, params: Params) -> str:
        a, b = BASES[params["base"]]
        fn = params["function"]
        return (
            f"    if n == 0:\n        return {a}\n    if n == 1:\n        return {b}\n"
            f"    return {fn}(n - 1) + {fn}(n - 2)\n"
        )

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        a, b = BASES[params["base"]]
        path = f"{mod}.py"
        body = self._body(params)
        source = f'def {fn}(n):\n    """f(0) = {a}, f(1) = {b}, f(n) = f(n-1) + f(n-2)."""\n{body}'
        hidden_n, visible_n = 22, 18
        tests = {
            f"{GRADING_DIR}/test_task.py": MEMO_TESTS.format(
                mod=mod,
                fn=fn,
                setup=COUNT_SETUP.format(mod=mod, fn=fn, n=hidden_n),
                values=[_sequence(a, b, n) for n in range(8)],
                n25=_sequence(a, b, 25),
                n=hidden_n,
                counted=_sequence(a, b, hidden_n),
                bound=3 * hidden_n,
                big=_sequence(a, b, 90),
            )
        }
        files = {
            path: source,
            f"{VISIBLE_TESTS_DIR}/test_{mod}.py": MEMO_VISIBLE.format(
                mod=mod,
                fn=fn,
                values=[(n, _sequence(a, b, n)) for n in (9, 10, 12)],
                n=visible_n,
                expected=_sequence(a, b, visible_n),
                bound=3 * visible_n,
            ),
        }
        instruction = [
            f"`{fn}` in `{path}` is exponential. Make it linear.",
            f"`{fn}(n)` recomputes the same values over and over, so it takes exponential "
            "time. Make it linear in `n` without changing its values.",
            f"Calling `{fn}` with a large `n` never finishes. Make it fast (a linear number of "
            "steps) and keep every value the same.",
        ][params["phrasing"]]
        fast = (
            f"    a, b = {a}, {b}\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
        )
        return instruction, files, tests, [Edit(path=path, old=body, new=fast)]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The loop one step short, the loop returning the value after `f(n)`, and a cache
        that is read but never written (still exponential)."""
        a, b = BASES[params["base"]]
        fn, path = params["function"], f"{params['module']}.py"
        body = self._body(params)
        short = f"    a, b = {a}, {b}\n    for _ in range(n - 1):\n        a, b = b, a + b\n    return a\n"
        ahead = (
            f"    a, b = {a}, {b}\n    for _ in range(n):\n        a, b = b, a + b\n    return b\n"
        )
        unfilled = (
            f"    if n in _seen:\n        return _seen[n]\n"
            f"    if n == 0:\n        return {a}\n    if n == 1:\n        return {b}\n"
            f"    return {fn}(n - 1) + {fn}(n - 2)\n"
        )
        header = f"def {fn}(n):"
        return [
            [Edit(path=path, old=body, new=short)],
            [Edit(path=path, old=body, new=ahead)],
            [
                Edit(path=path, old=body, new=unfilled),
                Edit(path=path, old=header, new="_seen = {}\n\n\n" + header),
            ],
        ]


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
    subtotal = 0
    for key in keys:
        row = store.get(key)
        subtotal += row["{price}"] * row["qty"]
    return subtotal
'''
TOTALS_FAST = '''def order_total(store, keys):
    """Sum of {price} * qty over the rows of `keys`."""
    rows = store.get_many(keys)
    subtotal = 0
    for key in keys:
        row = rows[key]
        subtotal += row["{price}"] * row["qty"]
    return subtotal
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
LABELS_BY_ROW = '''def labels(store, keys):
    """'name x qty' for each key, in order."""
    rows = store.get_many(keys)
    return [f"{row['name']} x {row['qty']}" for row in rows.values()]
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
    subtotal = sum(rows[k]["{price}"] * rows[k]["qty"] for k in keys)
    return lines + [f"total {{subtotal}}"]
'''

BATCH_SETUP = """class _Store:
    def __init__(self, rows):
        self._rows = rows
        self._log = []

    def get(self, key):
        self._log.append(key)
        return dict(self._rows[key])

    def get_many(self, keys):
        keys = list(keys)
        self._log.append(keys)
        return {{key: dict(self._rows[key]) for key in keys}}


import {module}
store = _Store({rows!r})
result = {module}.{function}(store, {keys!r})
queries = len(store._log)
"""
"""The grader's own store, built in the child: the workspace's `store.py` counts nothing
here, so editing it cannot change the count."""

BATCH_TESTS = """import pytest

from workspace_probe import evaluate

ROWS = {rows!r}
CASES = {cases!r}


def _run(module, function, keys):
    setup = {setup!r}.format(module=module, function=function, rows=ROWS, keys=keys)
    return evaluate("(result, queries)", setup=setup)


@pytest.mark.parametrize("module, function", {calls!r})
def test_same_answers_in_one_query(module, function):
    for keys, expected in CASES[function]:
        result, queries = _run(module, function, keys)
        assert result == expected, (function, keys)
        assert queries <= 1, f"{{function}} made {{queries}} queries; at most 1"
"""

BATCH_VISIBLE = '''"""The order functions give the same answers in at most one store query per call."""

import pytest

from labels import labels
from store import Store
from totals import order_total
from {mod} import {fn}

ROWS = {{
    "x": {{"name": "cup", "{price}": 2, "qty": 5}},
    "y": {{"name": "mug", "{price}": 7, "qty": 1}},
    "z": {{"name": "jar", "{price}": 3, "qty": 2}},
}}
KEYS = ["z", "x", "y", "x"]


@pytest.mark.parametrize(
    "call, expected",
    [
        (order_total, 33),
        (labels, ["jar x 2", "cup x 5", "mug x 1", "cup x 5"]),
        ({fn}, ["jar x 2", "cup x 5", "mug x 1", "cup x 5", "total 33"]),
    ],
)
def test_same_answers_in_one_query(call, expected):
    store = Store(ROWS)
    assert call(store, KEYS) == expected, f"{{call.__name__}}(store, {{KEYS}})"
    assert store.queries <= 1, f"{{call.__name__}} made {{store.queries}} queries; at most 1"
'''


def _batch_cases(price: str) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """The hidden tests' rows and, per function, (keys, expected) pairs."""
    rows: dict[str, dict[str, Any]] = {
        "k1": {"name": "nib", price: 6, "qty": 3},
        "k2": {"name": "tape", price: 1, "qty": 9},
        "k3": {"name": "clip", price: 4, "qty": 4},
        "k4": {"name": "file", price: 11, "qty": 1},
    }
    key_sets = [["k3", "k1", "k4", "k3", "k2"], ["k2"]]

    def total(keys: list[str]) -> int:
        return sum(rows[k][price] * rows[k]["qty"] for k in keys)

    def lines(keys: list[str]) -> list[str]:
        return [f"{rows[k]['name']} x {rows[k]['qty']}" for k in keys]

    return rows, {
        "order_total": [(k, total(k)) for k in key_sets],
        "labels": [(k, lines(k)) for k in key_sets],
        "report": [(k, [*lines(k), f"total {total(k)}"]) for k in key_sets],
    }


PRICES = ["price", "cost", "unit_price"]


class BatchQueries(Template):
    """Three modules query a store once per key; batch them to one query per call."""

    name: ClassVar[str] = "batch_queries"
    category: ClassVar[Category] = Category.OPTIMISATION
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=150,
            heldout=40,
            price=PRICES,
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["store.py", "totals.py", "labels.py", f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, price = params["module"], params["function"], params["price"]
        files = {
            "store.py": STORE,
            "totals.py": TOTALS_SLOW.replace("{price}", price),
            "labels.py": LABELS_SLOW,
            f"{mod}.py": REPORT_SLOW.format(fn=fn),
            f"{VISIBLE_TESTS_DIR}/test_queries.py": BATCH_VISIBLE.format(
                mod=mod, fn=fn, price=price
            ),
        }
        rows, cases = _batch_cases(price)
        cases[fn] = cases.pop("report")
        tests = {
            f"{GRADING_DIR}/test_task.py": BATCH_TESTS.format(
                rows=rows,
                cases=cases,
                setup=BATCH_SETUP,
                calls=[("totals", "order_total"), ("labels", "labels"), (mod, fn)],
            )
        }
        instruction = [
            f"`order_total`, `labels` and `{fn}` ({mod}.py) query the store once per key. "
            "Make each call at most one query.",
            f"`{fn}` in `{mod}.py` and the two functions it calls fetch one store row at a "
            "time. Use `get_many` so each call makes one query, same answers.",
            f"`{fn}` and the two helpers it calls fetch one row per key. Batch the lookups "
            "(`get_many`): at most one query per call, with the same results.",
        ][params["phrasing"]]
        edits = [
            Edit(path="totals.py", new=TOTALS_FAST.replace("{price}", price)),
            Edit(path="labels.py", new=LABELS_FAST),
            Edit(path=f"{mod}.py", new=REPORT_FAST.format(fn=fn, price=price)),
        ]
        return instruction, files, tests, edits

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Only the totals batched; the labels taken from the rows' order, not the keys'
        (duplicate keys lost); the two helpers batched but the report still calling both
        (two queries)."""
        _, _, _, (totals, labels, _) = self.render(params)
        return [
            [totals],
            [totals, Edit(path="labels.py", new=LABELS_BY_ROW)],
            [totals, labels],
        ]


INDEX_HELPER = '''def by_id(rows):
    """{row["id"]: row} over `rows`, built in one pass."""
    return {row["id"]: row for row in rows}
'''
LOOKUP_SLOW = '''def owner_names(purchases, customers):
    """The name of each order's customer, in order (orders of unknown customers left out)."""
    names = []
    for order in purchases:
        for customer in customers:
            if customer["id"] == order["customer"]:
                names.append(customer["name"])
                break
    return names
'''
LOOKUP_FAST = '''from index import by_id


def owner_names(purchases, customers):
    """The name of each order's customer, in order (orders of unknown customers left out)."""
    known = by_id(customers)
    return [known[o["customer"]]["name"] for o in purchases if o["customer"] in known]
'''
LOOKUP_STRICT = LOOKUP_FAST.replace(' if o["customer"] in known]', "]")
"""A wrong first attempt: the index, but an order of an unknown customer raises."""

SPENT_SLOW = '''def {fn}(purchases, customers):
    """{{name: cents spent}} of every customer, in the customers' order."""
    spent = {{}}
    for customer in customers:
        mine = [o["cents"] for o in purchases if o["customer"] == customer["id"]]
        spent[customer["name"]] = sum(mine)
    return spent
'''
SPENT_FAST = '''from index import by_id


def {fn}(purchases, customers):
    """{{name: cents spent}} of every customer, in the customers' order."""
    known = by_id(customers)
    spent = {{customer["name"]: 0 for customer in customers}}
    for order in purchases:
        if order["customer"] in known:
            spent[known[order["customer"]]["name"]] += order["cents"]
    return spent
'''
SPENT_BUYERS_ONLY = '''from index import by_id


def {fn}(purchases, customers):
    """{{name: cents spent}} of every customer, in the customers' order."""
    known = by_id(customers)
    spent = {{}}
    for order in purchases:
        if order["customer"] in known:
            name = known[order["customer"]]["name"]
            spent[name] = spent.get(name, 0) + order["cents"]
    return spent
'''
"""A wrong first attempt: the index, but customers without orders left out."""

AUDIT_SLOW = '''def unknown(purchases, customers):
    """The ids of the orders whose customer does not exist."""
    return [o["id"] for o in purchases if not any(c["id"] == o["customer"] for c in customers)]
'''
AUDIT_FAST = '''from index import by_id


def unknown(purchases, customers):
    """The ids of the orders whose customer does not exist."""
    known = by_id(customers)
    return [o["id"] for o in purchases if o["customer"] not in known]
'''

COUNTED = """class Counted(list):
    steps = 0

    def __iter__(self):
        for row in list.__iter__(self):
            Counted.steps += 1
            yield row

    def __contains__(self, row):
        Counted.steps += len(self)
        return list.__contains__(self, row)


class Key(int):
    def __eq__(self, other):
        Counted.steps += 1
        return int.__eq__(self, other)

    def __ne__(self, other):
        Counted.steps += 1
        return int.__ne__(self, other)

    __hash__ = int.__hash__


def keyed(rows, field):
    out = Counted()
    for row in rows:
        row = dict(row)
        row[field] = Key(row[field])
        out.append(row)
    return out
"""
"""A list that counts the rows each scan of it visits (iteration and `in`), and ids that
count each comparison (a scan of a list of ids the code made itself counts too; a dict or
set lookup costs one); no braces, as the hidden test formats it."""

LOOKUP_SETUP = (
    COUNTED
    + """

import {module}
customers = keyed({customers!r}, "id")
purchases = keyed({purchases!r}, "customer")
result = {module}.{function}(purchases, customers)
steps = Counted.steps
"""
)

LOOKUP_TESTS = """import pytest

from workspace_probe import evaluate

CUSTOMERS = [{{"id": 3 * i, "name": "c" + str(i)}} for i in range(200)]
ORDERS = [{{"id": n, "customer": 7 * n % 640, "cents": n % 40 + 1}} for n in range(600)]
SETUP = {setup!r}


def _expected(function):
    names = {{c["id"]: c["name"] for c in CUSTOMERS}}
    if function == "owner_names":
        return [names[o["customer"]] for o in ORDERS if o["customer"] in names]
    if function == "unknown":
        return [o["id"] for o in ORDERS if o["customer"] not in names]
    spent = {{c["name"]: 0 for c in CUSTOMERS}}
    for o in ORDERS:
        if o["customer"] in names:
            spent[names[o["customer"]]] += o["cents"]
    return spent


@pytest.mark.parametrize("module, function", {calls!r})
def test_same_answers_in_linear_steps(module, function):
    setup = SETUP.format(module=module, function=function, customers=CUSTOMERS, purchases=ORDERS)
    result, steps = evaluate("(result, steps)", setup=setup)
    assert result == _expected(function), function
    bound = 3 * (len(CUSTOMERS) + len(ORDERS))
    assert steps <= bound, f"{{function}} took {{steps}} steps (rows visited, ids compared); at most {{bound}}"
"""

LOOKUP_VISIBLE_HEAD = '''"""The lookups give the same answers in a linear number of steps (rows of the lists
visited, ids compared)."""

import pytest

from audit import unknown
from lookup import owner_names
from {mod} import {fn}


'''
LOOKUP_VISIBLE_TAIL = """

CUSTOMERS = [{{"id": i, "name": "n" + str(i)}} for i in range(0, 120, 2)]
ORDERS = [{{"id": k, "customer": 5 * k % 130, "cents": 10 + k % 7}} for k in range(240)]


@pytest.mark.parametrize("function", [owner_names, {fn}, unknown])
def test_linear_steps(function):
    Counted.steps = 0
    result = function(keyed(ORDERS, "customer"), keyed(CUSTOMERS, "id"))
    assert result == function(ORDERS, CUSTOMERS), f"{{function.__name__}}'s answer changed"
    bound = 3 * (len(ORDERS) + len(CUSTOMERS))
    assert Counted.steps <= bound, (
        f"{{function.__name__}} took {{Counted.steps}} steps; at most {{bound}}: index the "
        "customers by id once instead of scanning them for every order"
    )


def test_answers():
    assert owner_names(ORDERS[:3], CUSTOMERS) == ["n0", "n10"], "order 1's customer 5 is unknown"
    assert {fn}(ORDERS[:4], CUSTOMERS[:3]) == {{"n0": 10, "n2": 0, "n4": 0}}
    assert unknown(ORDERS[:4], CUSTOMERS) == [1, 3]
"""


class IndexLookups(Template):
    """Three modules join purchases to customers by scanning: index the customers by id once
    (a shared helper), graded by the rows a counting list sees."""

    name: ClassVar[str] = "index_lookups"
    category: ClassVar[Category] = Category.OPTIMISATION
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=100,
            heldout=25,
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["lookup.py", f"{params['module']}.py", "audit.py"]

    def _code(self, params: Params, lookup: str, spent: str, audit: str) -> dict[str, str]:
        return {
            "lookup.py": lookup,
            f"{params['module']}.py": spent.format(fn=params["function"]),
            "audit.py": audit,
        }

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        files = self._code(params, LOOKUP_SLOW, SPENT_SLOW, AUDIT_SLOW)
        files[f"{VISIBLE_TESTS_DIR}/test_lookups.py"] = (
            LOOKUP_VISIBLE_HEAD.format(mod=mod, fn=fn) + COUNTED + LOOKUP_VISIBLE_TAIL.format(fn=fn)
        )
        calls = [("lookup", "owner_names"), (mod, fn), ("audit", "unknown")]
        tests = {
            f"{GRADING_DIR}/test_task.py": LOOKUP_TESTS.format(setup=LOOKUP_SETUP, calls=calls)
        }
        instruction = [
            f"`owner_names`, `{fn}` ({mod}.py) and `unknown` scan every customer for each "
            "order. Index the customers by id once instead; same answers.",
            "Each join of an order to its customer scans every customer: quadratic. Make "
            "every such join linear with an index by id, keeping the results.",
            f"`{fn}` and the other two order/customer joins are slow on large inputs. Build "
            "a by-id index once per call (a shared helper) and keep every result the same.",
        ][params["phrasing"]]
        return instruction, files, tests, self._edits(params, LOOKUP_FAST, SPENT_FAST)

    def _edits(
        self, params: Params, lookup: str, spent: str, audit: str = AUDIT_FAST
    ) -> list[Edit]:
        before = self._code(params, LOOKUP_SLOW, SPENT_SLOW, AUDIT_SLOW)
        return diff_edits(
            before, {"index.py": INDEX_HELPER, **self._code(params, lookup, spent, audit)}
        )

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The audit still scanning; an order of an unknown customer raising; the customers
        without orders left out of the spending."""
        return [
            self._edits(params, LOOKUP_FAST, SPENT_FAST, AUDIT_SLOW),
            self._edits(params, LOOKUP_STRICT, SPENT_FAST),
            self._edits(params, LOOKUP_FAST, SPENT_BUYERS_ONLY),
        ]
