"""Migration: an API or a data format moved across several files.

The hidden tests check the behaviour after the move and that nothing still uses the old
form (the old function is gone, no caller names it, no tuple indexing of records is left).
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

NEW_API = ["line_total", "amount_of", "cost_of", "value_of"]

COMPAT = '''"""Old helpers kept for callers that have not moved yet."""

VERSION = 1


def {old}(price, qty):
    """Deprecated: use core.{new}(qty=..., price=...)."""
    return price * qty
'''
COMPAT_AFTER = '''"""Old helpers kept for callers that have not moved yet."""

VERSION = 1
'''
CORE = '''def {new}(*, qty, price):
    """The amount for `qty` units at `price`."""
    return price * qty
'''
CALLER = '''from compat import {old}


def {fn}(items):
    """Total of (price, qty) pairs."""
    return sum({old}(price, qty) for price, qty in items)
'''
CALLER_AFTER = '''from core import {new}


def {fn}(items):
    """Total of (price, qty) pairs."""
    return sum({new}(qty=qty, price=price) for price, qty in items)
'''

CALLSITE_TESTS = """from pathlib import Path

import compat
import {a}
import {b}


def test_behaviour():
    assert {a}.{fa}([(2, 3), (1, 4)]) == 10
    assert {b}.{fb}([(5, 1)]) == 5


def test_old_api_gone():
    assert not hasattr(compat, "{old}")
    assert compat.VERSION == 1
    for path in ("{a}.py", "{b}.py"):
        assert "{old}" not in Path(path).read_text(), path
"""


class MoveCallers(Template):
    """Callers in two modules move from a deprecated helper to a keyword-only API."""

    name: ClassVar[str] = "move_callers"
    category: ClassVar[Category] = Category.MIGRATION
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        # An old name inside a name the solution keeps ("total" in "grand_total") would make
        # "the old name is gone" untestable by its text: those combinations are left out.
        kept = [f for f in FUNCTIONS if not any(f in n for n in [*NEW_API, "grand_total"])]
        return grid(old=kept, new=NEW_API, module=MODULES)

    def _callers(self, params: Params) -> list[tuple[str, str]]:
        a = params["module"]
        b = MODULES[(MODULES.index(a) + 3) % len(MODULES)]
        fa = "subtotal" if params["old"] != "subtotal" else "amount"
        return [(a, fa), (b, "grand_total")]

    def context_files(self, params: Params) -> list[str]:
        return ["compat.py", "core.py", *(f"{m}.py" for m, _ in self._callers(params))]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        old, new = params["old"], params["new"]
        callers = self._callers(params)
        files = {"compat.py": COMPAT.format(old=old, new=new), "core.py": CORE.format(new=new)}
        edits = [Edit(path="compat.py", new=COMPAT_AFTER)]
        for mod, fn in callers:
            files[f"{mod}.py"] = CALLER.format(old=old, fn=fn)
            edits.append(Edit(path=f"{mod}.py", new=CALLER_AFTER.format(new=new, fn=fn)))
        (a, fa), (b, fb) = callers
        tests = {
            f"{GRADING_DIR}/test_task.py": CALLSITE_TESTS.format(a=a, b=b, fa=fa, fb=fb, old=old)
        }
        instruction = f"Move every caller of `compat.{old}` to `core.{new}`, then remove `{old}`."
        return instruction, files, tests, edits


MODELS_AFTER = """from dataclasses import dataclass


@dataclass(frozen=True)
class {record}:
    name: str
    {qty}: int
    price: int
"""
STOCK_BEFORE = '''"""Stock records are (name, {qty}, price) tuples."""


def in_stock(records):
    return [r for r in records if r[1] > 0]


def value(records):
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


def value(records):
    return sum(r.{qty} * r.price for r in records)


def restock(records, name, extra):
    return [replace(r, {qty}=r.{qty} + extra) if r.name == name else r for r in records]
'''
REPORT_BEFORE = """from stock import in_stock, value


def {fn}(records):
    lines = [f"{{r[0]}}: {{r[1]}} at {{r[2]}}" for r in in_stock(records)]
    lines.append(f"value {{value(records)}}")
    return "\\n".join(lines)


def cheapest(records):
    return min(records, key=lambda r: r[2])[0]
"""
REPORT_AFTER = """from stock import in_stock, value


def {fn}(records):
    lines = [f"{{r.name}}: {{r.{qty}}} at {{r.price}}" for r in in_stock(records)]
    lines.append(f"value {{value(records)}}")
    return "\\n".join(lines)


def cheapest(records):
    return min(records, key=lambda r: r.price).name
"""
LOADER_BEFORE = '''def load(text):
    """Parse 'name,{qty},price' lines into records."""
    records = []
    for line in text.strip().splitlines():
        name, count, price = line.split(",")
        records.append((name, int(count), int(price)))
    return records
'''
LOADER_AFTER = '''from models import {record}


def load(text):
    """Parse 'name,{qty},price' lines into records."""
    records = []
    for line in text.strip().splitlines():
        name, count, price = line.split(",")
        records.append({record}(name, int(count), int(price)))
    return records
'''

RECORD_TESTS = """import re
from dataclasses import fields
from pathlib import Path

import models
from loader import load
from report import cheapest, {fn}
from stock import restock

DATA = "pen,2,3\\nink,0,5\\npad,4,1\\n"


def test_records_are_dataclasses():
    records = load(DATA)
    assert all(isinstance(r, models.{record}) for r in records)
    assert [f.name for f in fields(models.{record})] == ["name", "{qty}", "price"]


def test_behaviour():
    records = load(DATA)
    assert {fn}(records) == "pen: 2 at 3\\npad: 4 at 1\\nvalue 10"
    assert cheapest(records) == "pad"
    assert [r.{qty} for r in restock(records, "ink", 3)] == [2, 3, 4]


def test_no_tuple_indexing_left():
    for path in ("stock.py", "report.py", "loader.py"):
        assert not re.search(r"\\br\\[\\d\\]", Path(path).read_text()), path
"""


class TuplesToDataclass(Template):
    """Records move from tuples to a dataclass across the loader, the logic and the report."""

    name: ClassVar[str] = "tuples_to_dataclass"
    category: ClassVar[Category] = Category.MIGRATION
    difficulty: ClassVar[int] = 3

    def parameter_space(self) -> list[Params]:
        return grid(
            record=["Item", "Entry", "Product", "Line"],
            qty=["qty", "count", "units", "stock"],
            function=FUNCTIONS,
        )

    def context_files(self, params: Params) -> list[str]:
        return ["models.py", "loader.py", "stock.py", "report.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        record, qty, fn = params["record"], params["qty"], params["function"]
        files = {
            "models.py": '"""Record types (to be filled in)."""\n',
            "loader.py": LOADER_BEFORE.format(qty=qty),
            "stock.py": STOCK_BEFORE.format(qty=qty),
            "report.py": REPORT_BEFORE.format(fn=fn),
        }
        tests = {f"{GRADING_DIR}/test_task.py": RECORD_TESTS.format(record=record, qty=qty, fn=fn)}
        instruction = (
            f"Make stock records a frozen dataclass `models.{record}(name, {qty}, price)` "
            "instead of tuples, everywhere."
        )
        edits = [
            Edit(path="models.py", new=MODELS_AFTER.format(record=record, qty=qty)),
            Edit(path="loader.py", new=LOADER_AFTER.format(record=record, qty=qty)),
            Edit(path="stock.py", new=STOCK_AFTER.format(record=record, qty=qty)),
            Edit(path="report.py", new=REPORT_AFTER.format(fn=fn, qty=qty)),
        ]
        return instruction, files, tests, edits
