"""Code review: find the defect in a given diff and report it (and, at difficulty 3, fix it).

The review is graded on what it says: `REVIEW.md` must name each defect as `path:line`
(the line in the file as the diff leaves it), and name nothing else, so listing every line
of the diff does not pass. The final message is free text for the user.
"""

from __future__ import annotations

import difflib
from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

REVIEW_FILE = "REVIEW.md"
DIFF_FILE = "CHANGE.diff"

LOCATIONS_CHECK = """import re
from pathlib import Path


def test_review_names_exactly_the_defects():
    text = Path({review!r}).read_text()
    found = set(re.findall(r"([A-Za-z_][A-Za-z0-9_/]*\\.py):(\\d+)", text))
    assert found == {expected}
"""


def set_literal(items: set[tuple[str, str]]) -> str:
    """A set's source text in sorted order (a set's repr follows hash order, which changes
    between interpreter runs, and the task's text must not)."""
    return "{" + ", ".join(repr(item) for item in sorted(items)) + "}"


def added_diff(files: dict[str, str]) -> str:
    """A unified diff that adds `files` (the change under review)."""
    chunks: list[str] = []
    for path, text in files.items():
        chunks += difflib.unified_diff(
            [], text.splitlines(keepends=True), fromfile="/dev/null", tofile=f"b/{path}"
        )
    return "".join(chunks)


def line_of(text: str, needle: str) -> int:
    """1-based number of the single line of `text` that contains `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    if len(hits) != 1:
        raise ValueError(f"{needle!r} is on {len(hits)} lines, expected one")
    return hits[0]


# kind: (docstring, right body line, wrong body line)
STAT_FUNCTIONS = {
    "total": ("Sum of the values.", "return sum(xs)", "return sum(xs[1:])"),
    "mean": (
        "Arithmetic mean of the values.",
        "return sum(xs) / len(xs)",
        "return sum(xs) / (len(xs) - 1)",
    ),
    "peak": ("Largest value.", "return max(xs)", "return min(xs)"),
    "spread": (
        "Largest minus smallest value.",
        "return max(xs) - min(xs)",
        "return max(xs) - xs[0]",
    ),
}


class ReviewDiff(Template):
    """A change adds four small functions to a module; one of them is wrong."""

    name: ClassVar[str] = "review_diff"
    category: ClassVar[Category] = Category.CODE_REVIEW
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, prefix=FUNCTIONS, defect=list(STAT_FUNCTIONS))

    def context_files(self, params: Params) -> list[str]:
        return [DIFF_FILE]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, prefix, defect = params["module"], params["prefix"], params["defect"]
        path = f"{mod}.py"
        blocks = []
        for kind, (doc, right, wrong) in STAT_FUNCTIONS.items():
            body = wrong if kind == defect else right
            blocks.append(f'def {prefix}_{kind}(xs):\n    """{doc}"""\n    {body}\n')
        source = "\n\n".join(blocks)
        line = line_of(source, STAT_FUNCTIONS[defect][2])
        files = {path: source, DIFF_FILE: added_diff({path: source})}
        tests = {
            f"{GRADING_DIR}/test_task.py": LOCATIONS_CHECK.format(
                review=REVIEW_FILE, expected=set_literal({(path, str(line))})
            )
        }
        instruction = (
            f"Review `{DIFF_FILE}`. Put the defect's `path:line` on the first line of "
            f"`{REVIEW_FILE}`, then say what is wrong."
        )
        review = (
            f"{path}:{line}\n\n`{prefix}_{defect}` does not match its docstring "
            f"({STAT_FUNCTIONS[defect][0].lower()[:-1]}): it should `{STAT_FUNCTIONS[defect][1]}`.\n"
        )
        return instruction, files, tests, [Edit(path=REVIEW_FILE, new=review)]


PARSE = '''def parse_amount(text):
    """'12.34' -> 1234 cents; '7' -> 700; '0.5' -> 50."""
    whole, _, frac = text.strip().partition(".")
    frac = (frac + "00")[:2]
    return int(whole) * 100 + int(frac)
'''
PARSE_BUG = ("return int(whole) * 100 + int(frac)", "return int(whole) * 10 + int(frac)")

CONVERT = '''from parse import parse_amount

RATES = {rates!r}


def convert(text, currency):
    """An amount in dollars (text) -> whole cents of `currency`, rounded down."""
    cents = parse_amount(text)
    return cents * RATES[currency] // 100
'''
CONVERT_BUG = ("return cents * RATES[currency] // 100", "return cents * 100 // RATES[currency]")

REPORT = '''from convert import convert


def {fn}(lines, currency):
    """Sum of the converted amounts, formatted as '<units>.<cents> <CURRENCY>'."""
    total = 0
    for line in lines:
        total += convert(line, currency)
    units, cents = divmod(total, 100)
    return f"{{units}}.{{cents:02d}} {{currency.upper()}}"
'''
REPORT_BUG = ("for line in lines:", "for line in lines[1:]:")

CLI = '''from report import {fn}


def main(argv):
    """main(["usd", "1.05", "2.00"]) prints the total of the amounts in that currency."""
    currency, *amounts = argv
    print({fn}(amounts, currency))
    return 0
'''
CLI_BUG = ("currency, *amounts = argv", "*amounts, currency = argv")

RATE_TABLES = [
    {"usd": 100, "eur": 92, "gbp": 79},
    {"usd": 100, "eur": 90, "chf": 88},
    {"usd": 100, "cad": 136, "eur": 93},
]
PARTS = ["parse", "convert", "report", "cli"]
DEFECT_SETS = [[p for p in PARTS if p != clean] for clean in PARTS]
"""Three of the four files carry a defect; which one is clean is a parameter."""

CHANGE_TESTS = """from convert import RATES, convert
from parse import parse_amount
from report import {fn}


def test_parse():
    assert parse_amount("12.34") == 1234
    assert parse_amount("7") == 700
    assert parse_amount("0.5") == 50


def test_convert():
    for currency, rate in RATES.items():
        assert convert("10.00", currency) == 1000 * rate // 100
    assert convert("1.50", "usd") == 150


def test_report():
    assert {fn}(["1.05", "2.00"], "usd") == "3.05 USD"
    assert {fn}(["0.02"], "usd") == "0.02 USD"
    assert {fn}([], "usd") == "0.00 USD"


def test_cli(capsys):
    from cli import main

    assert main(["usd", "1.05", "2.00"]) == 0
    assert capsys.readouterr().out == "3.05 USD\\n"
"""


class ReviewAndFix(Template):
    """A change across four files with three defects: list each as `path:line`, fix them."""

    name: ClassVar[str] = "review_and_fix"
    category: ClassVar[Category] = Category.CODE_REVIEW
    difficulty: ClassVar[int] = 3

    def parameter_space(self) -> list[Params]:
        return grid(function=FUNCTIONS, rates=list(range(len(RATE_TABLES))), defects=DEFECT_SETS)

    def context_files(self, params: Params) -> list[str]:
        return [DIFF_FILE]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        fn, defects = params["function"], params["defects"]
        right = {
            "parse": PARSE,
            "convert": CONVERT.format(rates=RATE_TABLES[params["rates"]]),
            "report": REPORT.format(fn=fn),
            "cli": CLI.format(fn=fn),
        }
        bugs = {"parse": PARSE_BUG, "convert": CONVERT_BUG, "report": REPORT_BUG, "cli": CLI_BUG}
        files: dict[str, str] = {}
        locations: set[tuple[str, str]] = set()
        edits: list[Edit] = []
        notes: list[str] = []
        for part, text in right.items():
            path = f"{part}.py"
            if part in defects:
                good, bad = bugs[part]
                text = text.replace(good, bad)
                line = line_of(text, bad)
                locations.add((path, str(line)))
                edits.append(Edit(path=path, old=bad, new=good))
                notes.append(f"- {path}:{line}: `{bad}` should be `{good}`.")
            files[path] = text
        files = {DIFF_FILE: added_diff(files), **files}
        tests = {
            f"{GRADING_DIR}/test_task.py": CHANGE_TESTS.format(fn=fn),
            f"{GRADING_DIR}/test_review.py": LOCATIONS_CHECK.format(
                review=REVIEW_FILE, expected=set_literal(locations)
            ),
        }
        instruction = (
            f"Review `{DIFF_FILE}`: fix its defects and list each as `path:line` in "
            f"`{REVIEW_FILE}`."
        )
        review = "Defects in the change (lines as the diff leaves them):\n\n" + "\n".join(notes)
        return instruction, files, tests, [*edits, Edit(path=REVIEW_FILE, new=review + "\n")]
