"""Debugging: a function returns the wrong thing; the fix is local, or (`float_money`) the
cause is a representation three modules share.

Each repository carries its own failing test (`tests/test_<module>.py`) whose message says
what the right value is; the hidden tests check other inputs and edge cases through
`workspace_probe`, never importing the repository.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    HIDDEN_TEST_PATH,
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


MONEY_BEFORE = '''"""Amounts of money as text: parsing and formatting."""


def parse_money(text):
    """'12.34' -> 12.34; '-0.50' -> -0.5."""
    return float(text)


def fmt(dollars):
    """12.3 -> '12.30'."""
    return f"{dollars:.2f}"
'''
MONEY_AFTER = '''"""Amounts of money as text: parsing and formatting, held as whole cents."""


def parse_money(text):
    """'12.34' -> 1234 cents; '-0.50' -> -50."""
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    whole, _, frac = text.lstrip("-").partition(".")
    return sign * (int(whole or "0") * 100 + int((frac + "00")[:2]))


def fmt(cents):
    """1230 -> '12.30'; -50 -> '-0.50'."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"
'''
MONEY_UNSIGNED = MONEY_AFTER.replace(
    """    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    whole, _, frac = text.lstrip("-").partition(".")
    return sign * (int(whole or "0") * 100 + int((frac + "00")[:2]))""",
    """    whole, _, frac = text.strip().partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])""",
)
"""A wrong first attempt: cents, but '-0.40' parsed as +40 (the sign of '-0' is lost)."""

VAT_BEFORE = '''def vat_on(dollars, percent):
    """The VAT on `dollars` at `percent`, rounded half up to the cent."""
    return round(dollars * percent / 100, 2)
'''
VAT_AFTER = '''def vat_on(cents, percent):
    """The VAT on `cents` at `percent`, in cents, rounded half up."""
    return (cents * percent + 50) // 100
'''
VAT_HALF_EVEN = '''def vat_on(cents, percent):
    """The VAT on `cents` at `percent`, in cents, rounded half up."""
    return round(cents * percent / 100)
'''
"""A wrong first attempt: cents, but `round` rounds half to even (10.5 -> 10)."""

INVOICE = '''from money import fmt, parse_money
from vat import vat_on


def {fn}(lines, percent):
    """Invoice rows for 'name,qty,price' lines (price with VAT at `percent` added), then
    the sum due."""
    rows = []
    due = {zero}
    for line in lines:
        name, qty, each = line.split(",")
        net = parse_money(each) * int(qty)
        gross = net + vat_on(net, percent)
        due += gross
        rows.append(f"{{name}}: {{fmt(gross)}}")
    rows.append(f"due: {{fmt(due)}}")
    return rows
'''

MONEY_VISIBLE = '''"""Invoice rows are exact to the cent: VAT rounded half up, credits negative."""

from money import fmt, parse_money
from {mod} import {fn}

LINES = {lines!r}
ROWS = {rows!r}


def test_rows_are_exact_to_the_cent():
    rows = {fn}(LINES, {percent})
    for got, expected, line in zip(rows, ROWS, LINES + ["(sum)"]):
        assert got == expected, (
            f"{{line}} at {percent}% VAT gives {{got!r}}, expected {{expected!r}} (amounts "
            "must be exact: price * qty, plus VAT rounded half up to the cent)"
        )


def test_a_credit_keeps_its_sign():
    assert fmt(parse_money("-0.40")) == "-0.40", "a credit of -0.40 should print as -0.40"
    assert {fn}(["refund,1,-0.40"], 0) == ["refund: -0.40", "due: -0.40"]
'''

MONEY_TESTS = """import pytest

from workspace_probe import call

CASES = {cases!r}


@pytest.mark.parametrize("case", range(len(CASES)))
def test_invoice_rows(case):
    lines, percent, expected = CASES[case]
    assert call({mod!r}, {fn!r}, lines, percent) == expected


def test_round_trip():
    for text in ["0.10", "12.34", "-1.20", "-0.05", "7.00"]:
        assert call("money", "fmt", call("money", "parse_money", text)) == text
"""

MONEY_VISIBLE_LINES = ["tape,3,0.35", "clip,5,0.15", "pad,2,1.45", "cap,1,-0.40"]
MONEY_HIDDEN_LINES = ["pen,7,0.15", "ink,2,0.45", "nib,3,1.50", "tag,3,0.30", "card,1,-1.20"]
MONEY_EXAMPLES = {5: "ink,2,0.45", 10: "pen,7,0.15", 15: "tag,3,0.30", 25: "nib,3,1.50"}
"""Per VAT percent, an invoice line whose float total is a cent off (the instruction's)."""


def _cents(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    whole, _, frac = text.lstrip("-").partition(".")
    return sign * (int(whole or "0") * 100 + int((frac + "00")[:2]))


def _money(cents: int) -> str:
    return f"{'-' if cents < 0 else ''}{abs(cents) // 100}.{abs(cents) % 100:02d}"


def _invoice(lines: list[str], percent: int) -> list[str]:
    """The right rows: exact cents, VAT rounded half up."""
    rows, due = [], 0
    for line in lines:
        name, qty, each = line.split(",")
        net = _cents(each) * int(qty)
        gross = net + (net * percent + 50) // 100
        due += gross
        rows.append(f"{name}: {_money(gross)}")
    return [*rows, f"due: {_money(due)}"]


def _float_gross(line: str, percent: int) -> str:
    """What the repository shows for one line (floats, `round`)."""
    _, qty, each = line.split(",")
    net = float(each) * int(qty)
    return f"{net + round(net * percent / 100, 2):.2f}"


class FloatMoney(Template):
    """Invoices are a cent off: money is floats in three modules; make every step exact."""

    name: ClassVar[str] = "float_money"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=100,
            heldout=25,
            percent=list(MONEY_EXAMPLES),
            phrasing=PHRASINGS,
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", "money.py", "vat.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, percent = params["module"], params["function"], params["percent"]
        files = {
            "money.py": MONEY_BEFORE,
            "vat.py": VAT_BEFORE,
            f"{mod}.py": INVOICE.format(fn=fn, zero="0.0"),
        }
        files[visible_test_path(mod)] = MONEY_VISIBLE.format(
            mod=mod,
            fn=fn,
            percent=percent,
            lines=MONEY_VISIBLE_LINES,
            rows=_invoice(MONEY_VISIBLE_LINES, percent),
        )
        other = 10 if percent != 10 else 25
        cases = [
            (MONEY_HIDDEN_LINES, percent, _invoice(MONEY_HIDDEN_LINES, percent)),
            (MONEY_HIDDEN_LINES[::-1], other, _invoice(MONEY_HIDDEN_LINES[::-1], other)),
            ([], percent, ["due: 0.00"]),
        ]
        tests = {HIDDEN_TEST_PATH: MONEY_TESTS.format(cases=cases, mod=mod, fn=fn)}
        example = MONEY_EXAMPLES[percent]
        item, qty, each = example.split(",")
        right = _invoice([example], percent)[0].split(": ")[1]
        shown = _float_gross(example, percent)
        instruction = {
            "explicit": (
                f"`{fn}` in `{mod}.py` is a cent off: {qty} x {each} plus {percent}% VAT "
                f"shows {shown}, not {right}. The amounts are floats; make every step exact."
            ),
            "symptom": (
                f"Invoices are off by a cent: {qty} {item}s at {each} plus {percent}% VAT "
                f"come to {shown} instead of {right}. Find why and make the amounts exact."
            ),
            "tests": (
                f"The tests of `{mod}.py` fail: invoice rows are a cent off because amounts "
                "are floats. Hold them exactly, with VAT rounded half up to the cent."
            ),
        }[params["phrasing"]]
        edits = [
            Edit(path="money.py", new=MONEY_AFTER),
            Edit(path="vat.py", new=VAT_AFTER),
            Edit(path=f"{mod}.py", old="due = 0.0", new="due = 0"),
        ]
        return instruction, files, tests, edits

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Cents, but VAT rounded half to even; cents, but a credit's sign lost; cents in
        the helpers, but the invoice still summing from a float."""
        *_, (money, vat, invoice) = self.render(params)
        return [
            [money, Edit(path="vat.py", new=VAT_HALF_EVEN), invoice],
            [Edit(path="money.py", new=MONEY_UNSIGNED), vat, invoice],
            [money, vat],
        ]
