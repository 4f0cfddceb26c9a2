"""Migration: an API or a data format moved across several files.

The hidden tests check the behaviour after the move and that nothing still uses the old
form (the old function is gone, no caller names it, no tuple indexing of records is left).
They reach the code only through the probe: callers are called in the child, with the new
API wrapped there by the test's own setup to see how it is called (keyword arguments, the
right values); records come back as `ObjectValue`s (type name and fields); files are read
as data.
"""

from __future__ import annotations

import re
from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.vocab import (
    CLASSES,
    FUNCTIONS,
    HELPERS,
    MODULES,
    PARAMS,
    name_split,
    names,
)

PHRASINGS = (0, 1, 2)

COMPAT = '''"""Old helpers kept for callers that have not moved yet."""

VERSION = 1


def {old}(cost, qty):
    """Deprecated: use core.{new}(qty=..., cost=...)."""
    return cost * qty
'''
COMPAT_AFTER = '''"""Old helpers kept for callers that have not moved yet."""

VERSION = 1
'''
CORE = '''def {new}(*, qty, cost):
    """The amount for `qty` units at `cost`."""
    return cost * qty
'''
CALLER = '''from compat import {old}


def {fn}(items):
    """Total of (cost, qty) pairs."""
    return sum({old}(cost, qty) for cost, qty in items)
'''
CALLER_AFTER = '''from core import {new}


def {fn}(items):
    """Total of (cost, qty) pairs."""
    return sum({new}(qty=qty, cost=cost) for cost, qty in items)
'''

SPY_SETUP = """import core
import {mod}
seen = []
real = core.{new}
def spy(*args, **kwargs):
    seen.append((list(args), dict(kwargs)))
    return real(*args, **kwargs)
core.{new} = spy
if hasattr({mod}, {new!r}):
    setattr({mod}, {new!r}, spy)
result = {mod}.{fn}({items!r})
"""
"""The new API wrapped in the child, so the test sees how each caller calls it."""

CALLSITE_TESTS = """import re

import pytest

from workspace_probe import call, evaluate, workspace_text

CALLERS = {callers!r}
SETUPS = {setups!r}


def test_behaviour():
    assert call({a!r}, {fa!r}, [(7, 2), (3, 5)]) == 29
    assert call({a!r}, {fa!r}, []) == 0
    assert call({b!r}, {fb!r}, [(4, 4)]) == 16


@pytest.mark.parametrize("module", sorted(SETUPS))
def test_callers_use_the_new_api(module):
    result, seen = evaluate("(result, seen)", setup=SETUPS[module])
    assert result == 27
    assert seen == [([], {{"qty": 2, "cost": 6}}), ([], {{"qty": 3, "cost": 5}})]


def test_old_api_gone():
    assert evaluate("hasattr(compat, {old!r})", imports=["compat"]) is False
    assert evaluate("compat.VERSION", imports=["compat"]) == 1
    for module in CALLERS:
        text = workspace_text(module + ".py")
        assert not re.search(r"\\b{old}\\b", text), module
"""

CALLSITE_VISIBLE = '''"""The callers' totals, and the deprecated helper's removal."""

import re
from pathlib import Path

import compat
import {a}
import {b}


def test_{fa}():
    assert {a}.{fa}([(3, 3), (2, 5)]) == 19, "{fa}([(3, 3), (2, 5)]) should be 3*3 + 2*5"


def test_{fb}():
    assert {b}.{fb}([(10, 1), (1, 10)]) == 20, "{fb}([(10, 1), (1, 10)]) should be 20"


def test_old_helper_is_removed():
    assert not hasattr(compat, "{old}"), "compat.{old} should be gone once nothing calls it"


def test_no_caller_uses_the_old_helper():
    for path in sorted(Path(".").glob("*.py")):
        if path.name != "compat.py":
            assert not re.search(r"\\b{old}\\b", path.read_text()), f"{{path}} still uses {old}"
'''


def _words(*texts: str) -> set[str]:
    return {w for text in texts for w in re.findall(r"[A-Za-z_]\w*", text)}


RESERVED = _words(COMPAT, CORE, CALLER, CALLER_AFTER) | {"core", "compat", "spy", "real"}
"""Words of the files the task writes: a name that is one of them could not be checked
gone by its text (`cost` is a variable of every caller)."""


class MoveCallers(Template):
    """Callers in two modules move from a deprecated helper to a keyword-only API."""

    name: ClassVar[str] = "move_callers"
    category: ClassVar[Category] = Category.MIGRATION
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("old", "new", "module")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {
                "old": [f for f in FUNCTIONS if f not in RESERVED],
                "new": HELPERS,
                "module": MODULES,
            },
            train=175,
            heldout=50,
            phrasing=list(PHRASINGS),
        )

    def _callers(self, params: Params) -> list[tuple[str, str]]:
        """(module, function) of the two callers: the second module and both functions
        follow from the drawn names, within their split."""
        split = name_split(params["module"])
        modules = names(MODULES, split)
        a = params["module"]
        b = modules[(modules.index(a) + 3) % len(modules)]
        pool = [f for f in names(FUNCTIONS, split) if f not in RESERVED and f != params["old"]]
        start = len(params["old"]) + len(a)
        return [(a, pool[start % len(pool)]), (b, pool[(start + 7) % len(pool)])]

    def context_files(self, params: Params) -> list[str]:
        return ["compat.py", "core.py", *(f"{m}.py" for m, _ in self._callers(params))]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        old, new = params["old"], params["new"]
        callers = self._callers(params)
        (a, fa), (b, fb) = callers
        files = {"compat.py": COMPAT.format(old=old, new=new), "core.py": CORE.format(new=new)}
        edits = []
        for mod, fn in callers:
            files[f"{mod}.py"] = CALLER.format(old=old, fn=fn)
            edits.append(Edit(path=f"{mod}.py", new=CALLER_AFTER.format(new=new, fn=fn)))
        edits.append(Edit(path="compat.py", new=COMPAT_AFTER))
        files[f"{VISIBLE_TESTS_DIR}/test_callers.py"] = CALLSITE_VISIBLE.format(
            a=a, b=b, fa=fa, fb=fb, old=old
        )
        setups = {
            mod: SPY_SETUP.format(mod=mod, fn=fn, new=new, items=[(6, 2), (5, 3)])
            for mod, fn in callers
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": CALLSITE_TESTS.format(
                callers=[a, b], setups=setups, a=a, b=b, fa=fa, fb=fb, old=old
            )
        }
        instruction = [
            f"Move every caller of `compat.{old}` to `core.{new}`, then remove `{old}`.",
            f"`{old}` in `compat.py` is deprecated. Switch its callers to `core.{new}` "
            "(keyword-only `qty` and `cost`) and delete it.",
            f"The old helper `{old}` is deprecated in favour of `{new}`. Move every caller "
            "over and remove the old helper.",
        ][params["phrasing"]]
        return instruction, files, tests, edits

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The callers moved but the old helper kept; the old helper removed with the
        callers left on it; one caller moved, the other forgotten."""
        *_, edits = self.render(params)
        first, second, compat = edits
        return [[first, second], [compat], [first, compat]]


MODELS_BEFORE = '"""Record types (to be filled in)."""\n'
MODELS_AFTER = """from dataclasses import dataclass


@dataclass(frozen=True)
class {record}:
    name: str
    {qty}: int
    cost: int
"""
MODELS_UNFROZEN = MODELS_AFTER.replace("(frozen=True)", "")
MODELS_REORDERED = """from dataclasses import dataclass


@dataclass(frozen=True)
class {record}:
    name: str
    cost: int
    {qty}: int
"""
STOCK_BEFORE = '''"""Stock records are (name, {qty}, cost) tuples."""


def in_stock(records):
    return [r for r in records if r[1] > 0]


def worth(records):
    return sum(r[1] * r[2] for r in records)


def restock(records, name, extra):
    out = []
    for r in records:
        if r[0] == name:
            out.append((r[0], r[1] + extra, r[2]))
        else:
            out.append(r)
    return out
'''
STOCK_AFTER = '''"""Stock records are models.{record} objects."""

from dataclasses import replace


def in_stock(records):
    return [r for r in records if r.{qty} > 0]


def worth(records):
    return sum(r.{qty} * r.cost for r in records)


def restock(records, name, extra):
    return [replace(r, {qty}=r.{qty} + extra) if r.name == name else r for r in records]
'''
REPORT_BEFORE = """from stock import in_stock, worth


def {fn}(records):
    lines = [f"{{r[0]}}: {{r[1]}} at {{r[2]}}" for r in in_stock(records)]
    lines.append(f"worth {{worth(records)}}")
    return "\\n".join(lines)


def cheapest(records):
    return min(records, key=lambda r: r[2])[0]
"""
REPORT_AFTER = """from stock import in_stock, worth


def {fn}(records):
    lines = [f"{{r.name}}: {{r.{qty}}} at {{r.cost}}" for r in in_stock(records)]
    lines.append(f"worth {{worth(records)}}")
    return "\\n".join(lines)


def cheapest(records):
    return min(records, key=lambda r: r.cost).name
"""
LOADER_BEFORE = '''def load(text):
    """Parse 'name,{qty},cost' lines into records."""
    records = []
    for line in text.strip().splitlines():
        name, number, cost = line.split(",")
        records.append((name, int(number), int(cost)))
    return records
'''
LOADER_AFTER = '''from models import {record}


def load(text):
    """Parse 'name,{qty},cost' lines into records."""
    records = []
    for line in text.strip().splitlines():
        name, number, cost = line.split(",")
        records.append({record}(name, int(number), int(cost)))
    return records
'''

RECORD_DATA = "nib,5,2\ncap,0,9\nrod,3,4\nbox,1,1\n"

RECORD_TESTS = """import re

from workspace_probe import ObjectValue, call, evaluate, workspace_text

DATA = {data!r}
LOADED = "loader.load(" + repr(DATA) + ")"
MODULES = ["dataclasses", "loader", "models", "report", "stock"]


def test_records_are_frozen_dataclasses():
    checks = evaluate(
        "[dataclasses.is_dataclass(r) and type(r) is models.{record} for r in " + LOADED + "]",
        imports=MODULES,
    )
    assert checks == [True, True, True, True]
    fields = evaluate("[f.name for f in dataclasses.fields(models.{record})]", imports=MODULES)
    assert fields == ["name", {qty!r}, "cost"]
    assert evaluate("models.{record}.__dataclass_params__.frozen", imports=MODULES) is True
    assert call("loader", "load", DATA) == [
        ObjectValue({record!r}, {{"name": name, {qty!r}: qty, "cost": cost}})
        for name, qty, cost in {rows!r}
    ]


def test_behaviour():
    assert evaluate("report.{fn}(" + LOADED + ")", imports=MODULES) == {report!r}
    assert evaluate("report.cheapest(" + LOADED + ")", imports=MODULES) == "box"
    assert evaluate("[r.name for r in stock.in_stock(" + LOADED + ")]", imports=MODULES) == [
        "nib", "rod", "box"
    ]
    restocked = evaluate("stock.restock(" + LOADED + ", 'cap', 6)", imports=MODULES)
    assert [(r.type_name, r.{qty}) for r in restocked] == [
        ({record!r}, 5), ({record!r}, 6), ({record!r}, 3), ({record!r}, 1)
    ]


def test_no_tuple_indexing_left():
    for path in ("stock.py", "report.py", "loader.py"):
        assert not re.search(r"\\br\\[\\d\\]", workspace_text(path)), path
"""

RECORD_VISIBLE = '''"""Stock records as models.{record} objects, through loading, stock and the report."""

import dataclasses

import pytest

import models
from loader import load
from report import cheapest, {fn}
from stock import in_stock, restock, worth

DATA = "cup,4,3\\nlid,0,2\\nbowl,2,5\\n"


def test_load_gives_{record_lower}_records():
    records = load(DATA)
    assert hasattr(models, "{record}"), "models.py should define the {record} dataclass"
    assert all(isinstance(r, models.{record}) for r in records), (
        "load should return models.{record} objects, not tuples"
    )
    names = [f.name for f in dataclasses.fields(models.{record})]
    assert names == ["name", "{qty}", "cost"], f"{record}'s fields are {{names}}"


def test_records_are_frozen():
    record = load(DATA)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.cost = 1


def test_stock_and_report():
    records = load(DATA)
    assert [r.name for r in in_stock(records)] == ["cup", "bowl"]
    assert worth(records) == 22, "worth should be 4*3 + 0*2 + 2*5"
    assert {fn}(records) == "cup: 4 at 3\\nbowl: 2 at 5\\nworth 22"
    assert cheapest(records) == "lid"
    assert [r.{qty} for r in restock(records, "lid", 2)] == [4, 2, 2]
'''

RECORD_RESERVED = _words(STOCK_AFTER, REPORT_AFTER, LOADER_AFTER, MODELS_AFTER) | {"models"}
"""Words the record files already use: a field or function of that name would clash."""


def _record_expectations() -> tuple[list[tuple[str, int, int]], str]:
    rows = [
        (name, int(qty), int(cost))
        for name, qty, cost in (line.split(",") for line in RECORD_DATA.strip().splitlines())
    ]
    lines = [f"{name}: {qty} at {cost}" for name, qty, cost in rows if qty > 0]
    lines.append(f"worth {sum(qty * cost for _, qty, cost in rows)}")
    return rows, "\n".join(lines)


class TuplesToDataclass(Template):
    """Records move from tuples to a dataclass across the loader, the logic and the report."""

    name: ClassVar[str] = "tuples_to_dataclass"
    category: ClassVar[Category] = Category.MIGRATION
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("record", "qty", "function")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {
                "record": CLASSES,
                "qty": [p for p in PARAMS if p not in RECORD_RESERVED],
                "function": [f for f in FUNCTIONS if f not in RECORD_RESERVED],
            },
            train=100,
            heldout=25,
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["models.py", "loader.py", "stock.py", "report.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        record, qty, fn = params["record"], params["qty"], params["function"]
        files = {
            "models.py": MODELS_BEFORE,
            "loader.py": LOADER_BEFORE.format(qty=qty),
            "stock.py": STOCK_BEFORE.format(qty=qty),
            "report.py": REPORT_BEFORE.format(fn=fn),
            f"{VISIBLE_TESTS_DIR}/test_records.py": RECORD_VISIBLE.format(
                record=record, record_lower=record.lower(), qty=qty, fn=fn
            ),
        }
        rows, report = _record_expectations()
        tests = {
            f"{GRADING_DIR}/test_task.py": RECORD_TESTS.format(
                data=RECORD_DATA, record=record, qty=qty, fn=fn, rows=rows, report=report
            )
        }
        instruction = [
            f"Make stock records a frozen dataclass `models.{record}(name, {qty}, cost)` "
            "instead of tuples, everywhere.",
            f"Stock records are `(name, {qty}, cost)` tuples. Replace them with a frozen "
            f"dataclass `{record}` in `models.py` and update every module that uses them.",
            f"Records are still plain tuples indexed by position. Add a frozen dataclass "
            f"`{record}` (fields `name`, `{qty}`, `cost`) beside the other record types and "
            "move every use to it.",
        ][params["phrasing"]]
        return instruction, files, tests, self._edits(params, MODELS_AFTER)

    def _edits(self, params: Params, models: str) -> list[Edit]:
        record, qty, fn = params["record"], params["qty"], params["function"]
        return [
            Edit(path="models.py", new=models.format(record=record, qty=qty)),
            Edit(path="loader.py", new=LOADER_AFTER.format(record=record, qty=qty)),
            Edit(path="stock.py", new=STOCK_AFTER.format(record=record, qty=qty)),
            Edit(path="report.py", new=REPORT_AFTER.format(fn=fn, qty=qty)),
        ]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The dataclass and the loader done but the logic still indexing; the dataclass
        not frozen; its fields in another order than the loader passes them."""
        models, loader, _, _ = self._edits(params, MODELS_AFTER)
        return [
            [models, loader],
            self._edits(params, MODELS_UNFROZEN),
            self._edits(params, MODELS_REORDERED),
        ]
