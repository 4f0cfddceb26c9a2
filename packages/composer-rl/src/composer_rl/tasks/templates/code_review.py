"""Code review: find the defect in a given diff and report it (and, at difficulty 3, fix it).

The review is graded on what it says: `REVIEW.md` must name each defect as `path:line`
(the line in the file as the diff leaves it), and name nothing else, so listing every line
of the diff does not pass. The final message is free text for the user.

The repository's own tests check what can be checked without giving the answer away: that
the review names locations of the change (a file it adds, not the diff; a line of code, not
a header or docstring) and, where the task also fixes the change, its behaviour. The hidden
tests read the review as data (`workspace_text`) and call the code through the probe.
"""

from __future__ import annotations

import difflib
from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

REVIEW_FILE = "REVIEW.md"
DIFF_FILE = "CHANGE.diff"
PHRASINGS = (0, 1, 2)

LOCATIONS_CHECK = """import re

from workspace_probe import workspace_text


def test_review_names_exactly_the_defects():
    text = workspace_text({review!r})
    found = set(re.findall(r"([A-Za-z_][A-Za-z0-9_/]*\\.py):(\\d+)", text))
    assert found == {expected}
"""

VISIBLE_REVIEW_TESTS = '''"""Checks on the form of REVIEW.md: each defect named as path:line of the change."""

import re
from pathlib import Path

LOCATION = re.compile(r"([A-Za-z_][A-Za-z0-9_/.]*):(\\d+)")
CHANGED = {changed}
"""The files the change adds."""


def locations():
    review = Path("{review}")
    assert review.is_file(), "write the review to {review} (each defect as path:line)"
    found = sorted(set(LOCATION.findall(review.read_text())))
    assert found, "{review} names no location: write each defect as path:line"
    return found
{count_test}

def test_locations_are_files_of_the_change():
    for path, line in locations():
        assert path in CHANGED, (
            f"{{path}}:{{line}}: {{path}} is not a file the change adds {{sorted(CHANGED)}}; "
            "give the line in the changed file, not in the diff"
        )


def test_locations_are_lines_of_code():
    for path, line in locations():
        if path not in CHANGED:
            continue
        lines = Path(path).read_text().splitlines()
        number = int(line)
        assert 1 <= number <= len(lines), f"{{path}} has {{len(lines)}} lines, not {{number}}"
        text = lines[number - 1].strip()
        assert text and not text.startswith(("def ", '"""', "#", "from ", "import ")), (
            f"{{path}}:{{number}} is {{text!r}}: name the line that is wrong, not a header, "
            "an import, a docstring or a blank line"
        )
'''

COUNT_ONE = """

def test_review_names_one_location():
    found = locations()
    assert len(found) == 1, f"name exactly one defect; {review} names {{found}}"
"""


def set_literal(items: set[tuple[str, str]]) -> str:
    """A set's source text in sorted order (a set's repr follows hash order, which changes
    between interpreter runs, and the task's text must not)."""
    return "{" + ", ".join(repr(item) for item in sorted(items)) + "}"


def visible_review_tests(changed: list[str], *, exactly_one: bool) -> str:
    count = COUNT_ONE.format(review=REVIEW_FILE) if exactly_one else ""
    changed_literal = "{" + ", ".join(repr(p) for p in sorted(changed)) + "}"
    return VISIBLE_REVIEW_TESTS.format(
        changed=changed_literal, review=REVIEW_FILE, count_test=count
    )


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
    name_params: ClassVar[tuple[str, ...]] = ("module", "prefix")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "prefix": FUNCTIONS},
            train=200,
            heldout=55,
            defect=list(STAT_FUNCTIONS),
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return [DIFF_FILE]

    def _source(self, params: Params) -> tuple[str, str, int]:
        """(path, source as the change leaves it, line of the defect)."""
        prefix, defect = params["prefix"], params["defect"]
        blocks = []
        for kind, (doc, right, wrong) in STAT_FUNCTIONS.items():
            body = wrong if kind == defect else right
            blocks.append(f'def {prefix}_{kind}(xs):\n    """{doc}"""\n    {body}\n')
        source = "\n\n".join(blocks)
        return f"{params['module']}.py", source, line_of(source, STAT_FUNCTIONS[defect][2])

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        prefix, defect = params["prefix"], params["defect"]
        path, source, line = self._source(params)
        files = {
            path: source,
            DIFF_FILE: added_diff({path: source}),
            f"{VISIBLE_TESTS_DIR}/test_review.py": visible_review_tests([path], exactly_one=True),
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": LOCATIONS_CHECK.format(
                review=REVIEW_FILE, expected=set_literal({(path, str(line))})
            )
        }
        instruction = [
            f"Review `{DIFF_FILE}`. Put the defect's `path:line` on the first line of "
            f"`{REVIEW_FILE}`, then say what is wrong.",
            f"The change to `{path}` adds four functions and one of them does not do what its "
            f"docstring says. Write its `path:line` in `{REVIEW_FILE}` and how to fix it.",
            "A change waits for review (its diff is in the repository). Find the one line that "
            f"is wrong and name it as `path:line` in `{REVIEW_FILE}`.",
        ][params["phrasing"]]
        doc, right, _ = STAT_FUNCTIONS[defect]
        review = (
            f"{path}:{line}\n\n`{prefix}_{defect}` does not match its docstring "
            f"({doc.lower()[:-1]}): it should `{right}`.\n"
        )
        return instruction, files, tests, [Edit(path=REVIEW_FILE, new=review)]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Every function's line named "to be safe", the defective function's header named
        instead of its line, and the line counted in the diff instead of the file."""
        path, source, _ = self._source(params)
        diff = added_diff({path: source})
        every = [
            n for n, text in enumerate(source.splitlines(), 1) if text.strip().startswith("return")
        ]
        header = line_of(source, f"def {params['prefix']}_{params['defect']}(")
        in_diff = line_of(diff, STAT_FUNCTIONS[params["defect"]][2])
        return [
            [Edit(path=REVIEW_FILE, new="".join(f"{path}:{n}\n" for n in every))],
            [Edit(path=REVIEW_FILE, new=f"{path}:{header}\n")],
            [Edit(path=REVIEW_FILE, new=f"{DIFF_FILE}:{in_diff}\n")],
        ]


PARSE = '''def parse_amount(text):
    """'12.34' -> 1234 cents; '7' -> 700; '0.5' -> 50."""
    whole, _, frac = text.strip().partition(".")
    frac = (frac + "00")[:2]
    return int(whole) * 100 + int(frac)
'''
PARSE_BUG = ("return int(whole) * 100 + int(frac)", "return int(whole) * 10 + int(frac)")

EXCHANGE = '''from parse import parse_amount

RATES = {rates!r}


def exchange(text, currency):
    """An amount in dollars (text) -> whole cents of `currency`, rounded down."""
    cents = parse_amount(text)
    return cents * RATES[currency] // 100
'''
EXCHANGE_BUG = ("return cents * RATES[currency] // 100", "return cents * 100 // RATES[currency]")

REPORT = '''from exchange import exchange


def {fn}(lines, currency):
    """Sum of the converted amounts, formatted as '<whole>.<cents> <CURRENCY>'."""
    summed = 0
    for line in lines:
        summed += exchange(line, currency)
    whole, cents = divmod(summed, 100)
    return f"{{whole}}.{{cents:02d}} {{currency.upper()}}"
'''
REPORT_BUG = ("for line in lines:", "for line in lines[1:]:")

CLI = '''import sys

from {mod} import {fn}


def main(argv):
    """main(["usd", "1.05", "2.00"]) prints the total of the amounts in that currency."""
    currency, *amounts = argv
    print({fn}(amounts, currency))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
'''
CLI_BUG = ("currency, *amounts = argv", "*amounts, currency = argv")

RATE_TABLES = [
    {"usd": 100, "eur": 92, "gbp": 79},
    {"usd": 100, "eur": 90, "chf": 88},
    {"usd": 100, "cad": 136, "eur": 93},
]
PARTS = ["parse", "exchange", "report", "cli"]
DEFECT_SETS = [[p for p in PARTS if p != clean] for clean in PARTS]
"""Three of the four files carry a defect; which one is clean is a parameter."""

CHANGE_TESTS = """from workspace_probe import call, run

RATES = {rates!r}


def test_parse():
    assert call("parse", "parse_amount", "45.67") == 4567
    assert call("parse", "parse_amount", "3") == 300
    assert call("parse", "parse_amount", "0.05") == 5
    assert call("parse", "parse_amount", " 8.1 ") == 810


def test_exchange():
    for currency, rate in RATES.items():
        assert call("exchange", "exchange", "20.00", currency) == 2000 * rate // 100
        assert call("exchange", "exchange", "0.37", currency) == 37 * rate // 100
    assert call("exchange", "exchange", "3.75", "usd") == 375


def test_report():
    assert call({mod!r}, {fn!r}, ["2.10", "0.95", "4.00"], "usd") == "7.05 USD"
    assert call({mod!r}, {fn!r}, ["0.07"], "usd") == "0.07 USD"
    assert call({mod!r}, {fn!r}, [], "usd") == "0.00 USD"
    assert call({mod!r}, {fn!r}, ["6.00", "4.00"], {other!r}) == {other_total!r}


def test_cli():
    proc = run(["python", "cli.py", "usd", "2.10", "0.95"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "3.05 USD\\n"
"""

VISIBLE_CHANGE_TESTS = '''"""The converter's behaviour, file by file."""

from cli import main
from exchange import RATES, exchange
from parse import parse_amount
from {mod} import {fn}


def test_parse_amount():
    assert parse_amount("5.25") == 525, "parse_amount('5.25') should be 525 cents"
    assert parse_amount("12") == 1200, "parse_amount('12') should be 1200 cents"


def test_exchange_uses_the_rate():
    for currency, per_dollar in RATES.items():
        expected = 400 * per_dollar // 100
        assert exchange("4.00", currency) == expected, (
            f"exchange('4.00', {{currency!r}}) should be 400 cents * {{per_dollar}} // 100 = "
            f"{{expected}}"
        )


def test_{fn}_sums_every_line():
    assert {fn}(["1.25", "0.50"], "usd") == "1.75 USD", "1.25 + 0.50 should be 1.75 USD"


def test_cli_prints_the_total(capsys):
    assert main(["usd", "0.40", "0.35"]) == 0
    assert capsys.readouterr().out == "0.75 USD\\n", "main(['usd', '0.40', '0.35'])"
'''


class ReviewAndFix(Template):
    """A change across four files with three defects: list each as `path:line`, fix them."""

    name: ClassVar[str] = "review_and_fix"
    category: ClassVar[Category] = Category.CODE_REVIEW
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=80,
            heldout=20,
            rates=list(range(len(RATE_TABLES))),
            defects=DEFECT_SETS,
            phrasing=list(PHRASINGS),
        )

    def context_files(self, params: Params) -> list[str]:
        return [DIFF_FILE]

    def _parts(self, params: Params) -> dict[str, tuple[str, str, tuple[str, str]]]:
        """part -> (path, right text, (right line, wrong line))."""
        mod, fn = params["module"], params["function"]
        return {
            "parse": ("parse.py", PARSE, PARSE_BUG),
            "exchange": (
                "exchange.py",
                EXCHANGE.format(rates=RATE_TABLES[params["rates"]]),
                EXCHANGE_BUG,
            ),
            "report": (f"{mod}.py", REPORT.format(fn=fn), REPORT_BUG),
            "cli": ("cli.py", CLI.format(mod=mod, fn=fn), CLI_BUG),
        }

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, defects = params["module"], params["function"], params["defects"]
        rates = RATE_TABLES[params["rates"]]
        code: dict[str, str] = {}
        locations: set[tuple[str, str]] = set()
        edits: list[Edit] = []
        notes: list[str] = []
        for part, (path, text, (good, bad)) in self._parts(params).items():
            if part in defects:
                text = text.replace(good, bad)
                line = line_of(text, bad)
                locations.add((path, str(line)))
                edits.append(Edit(path=path, old=bad, new=good))
                notes.append(f"- {path}:{line}: `{bad}` should be `{good}`.")
            code[path] = text
        files = {
            DIFF_FILE: added_diff(code),
            **code,
            f"{VISIBLE_TESTS_DIR}/test_change.py": VISIBLE_CHANGE_TESTS.format(mod=mod, fn=fn),
            f"{VISIBLE_TESTS_DIR}/test_review.py": visible_review_tests(
                list(code), exactly_one=False
            ),
        }
        other = next(c for c in rates if c != "usd")
        tests = {
            f"{GRADING_DIR}/test_task.py": CHANGE_TESTS.format(
                rates=rates,
                mod=mod,
                fn=fn,
                other=other,
                other_total=_money(600 * rates[other] // 100 + 400 * rates[other] // 100, other),
            ),
            f"{GRADING_DIR}/test_review.py": LOCATIONS_CHECK.format(
                review=REVIEW_FILE, expected=set_literal(locations)
            ),
        }
        instruction = [
            f"Review `{DIFF_FILE}`: fix its defects and list each as `path:line` in "
            f"`{REVIEW_FILE}`.",
            f"The change in `{DIFF_FILE}` adds an amount converter in four files, with bugs. "
            f"Fix them and list where each was (`path:line`) in `{REVIEW_FILE}`.",
            "A change under review (its diff is in the repository) has defects. Fix each one "
            f"and write where it was as `path:line` in `{REVIEW_FILE}`.",
        ][params["phrasing"]]
        review = "Defects in the change (lines as the diff leaves them):\n\n" + "\n".join(notes)
        return instruction, files, tests, [*edits, Edit(path=REVIEW_FILE, new=review + "\n")]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The review with the diff's line numbers; the review alone, nothing fixed; every
        defect but the last fixed."""
        _, files, _, solution = self.render(params)
        fixes, review = solution[:-1], solution[-1]
        diff = files[DIFF_FILE]
        in_diff = "".join(f"- {DIFF_FILE}:{line_of(diff, str(e.old))}\n" for e in fixes)
        return [
            [*fixes, Edit(path=REVIEW_FILE, new=in_diff)],
            [review],
            [*fixes[:-1], review],
        ]


def _money(cents: int, currency: str) -> str:
    units, rest = divmod(cents, 100)
    return f"{units}.{rest:02d} {currency.upper()}"
