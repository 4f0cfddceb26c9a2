"""Code review: find the defect in a given diff and report it (and, at difficulty 3, fix it),
or address a reviewer's comments (`address_review`).

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
from composer_rl.tasks.templates.common import cached_space, diff_edits, draw_names
from composer_rl.tasks.templates.vocab import CONSTANTS, FUNCTIONS, MODULES

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


ORDER_MODULE = '''{constant}def line_total(each, qty):
    """The price of `qty` pieces at `each`."""
{check}    return each * qty


def {fn}(lines):
    """The order's total for (each, qty) lines, 10% off above {limit}."""
    subtotal = 0
    for each, qty in lines:
        subtotal += {line}
    if subtotal > {limit}:
        subtotal -= subtotal // 10
    return subtotal
'''
ORDER_CONSTANT = '{const} = 100\n"""Orders above this subtotal get 10% off."""\n\n\n'
ORDER_CHECK = '    if qty < 0:\n        raise ValueError("negative quantity")\n'

ORDER_CLI = '''"""python cli.py FILE: the total of FILE's 'each,qty' lines."""

import sys

from {mod} import {fn}


def main(argv=None):
    path = (sys.argv[1:] if argv is None else argv)[0]
{read}    print({fn}(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''
ORDER_READ = """    with open(path) as handle:
        lines = [tuple(int(v) for v in row.split(",")) for row in handle if row.strip()]
"""
ORDER_READ_CHECKED = """    try:
        with open(path) as handle:
            lines = [tuple(int(v) for v in row.split(",")) for row in handle if row.strip()]
    except FileNotFoundError:
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
"""

ORDER_REVIEW = """# Review of the order total

{items}
Tick each comment (`- [x]`) once it is addressed.
"""

ORDER_VISIBLE = '''"""What the review asks for, checked on other orders than the ones in it."""

import ast
from pathlib import Path

import cli
import {mod}


def test_{fn}_keeps_its_totals():
    assert {mod}.{fn}([(4, 5), (3, 2)]) == 26
    assert {mod}.{fn}([(30, 4)]) == 108, "120 is above the threshold: 10% off gives 108"


def test_a_negative_quantity_is_refused():
    try:
        {mod}.line_total(3, -2)
    except ValueError as exc:
        assert "negative quantity" in str(exc), f"say 'negative quantity', not {{exc}}"
    else:
        raise AssertionError("line_total(3, -2) should raise ValueError('negative quantity')")


def test_{fn}_uses_line_total_and_the_constant():
    assert getattr({mod}, "{const}", None) == 100, "{mod}.py should define {const} = 100"
    tree = ast.parse(Path("{mod}.py").read_text())
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "{fn}")
    called = {{n.func.id for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}}
    assert "line_total" in called, "{fn} should call line_total, not repeat its arithmetic"


def test_a_missing_file_is_an_error_message(capsys):
    try:
        code = cli.main(["no-such-orders.csv"])
    except FileNotFoundError:
        raise AssertionError("a missing file should print an error and exit 2, not raise") from None
    assert code == 2, f"main should return 2 for a missing file, not {{code}}"
    assert capsys.readouterr().err == "error: no such file: no-such-orders.csv\\n"


def test_every_comment_is_ticked():
    open_items = [line for line in Path("REVIEW.md").read_text().splitlines() if line.startswith("- [ ]")]
    assert not open_items, f"REVIEW.md has {{len(open_items)}} open comments: tick each one you addressed"
'''

ORDER_TESTS = """import ast
import re

from workspace_probe import call, evaluate, run, workspace_text

MODULE = {mod!r}
REVIEW = {review!r}

RAISES = '''import {mod}
try:
    {{call}}
    said = None
except ValueError as exc:
    said = str(exc)
'''


def test_totals():
    assert call(MODULE, {fn!r}, [(6, 3), (2, 5)]) == 28
    assert call(MODULE, {fn!r}, [(25, 4), (1, 1)]) == 91
    assert call(MODULE, {fn!r}, [(50, 2)]) == 100
    assert call(MODULE, {fn!r}, []) == 0


def test_negative_quantities_raise():
    for code in ["{mod}.line_total(5, -1)", "{mod}.{fn}([(2, 3), (4, -2)])"]:
        said = evaluate("said", setup=RAISES.format(call=code))
        assert said is not None and "negative quantity" in said, code
    assert call(MODULE, "line_total", 5, 0) == 0


def test_{fn}_calls_line_total_and_names_the_threshold():
    assert evaluate(MODULE + ".{const}", imports=[MODULE]) == 100
    tree = ast.parse(workspace_text(MODULE + ".py"))
    (body,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == {fn!r}]
    nodes = list(ast.walk(body))
    assert "line_total" in {{n.func.id for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}}
    assert {const!r} in {{n.id for n in nodes if isinstance(n, ast.Name)}}
    assert not any(isinstance(n, ast.Constant) and n.value == 100 for n in nodes)


def test_missing_file(tmp_path):
    missing = str(tmp_path / "gone.csv")
    proc = run(["python", "cli.py", missing])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: no such file: " + missing + "\\n"
    data = tmp_path / "order.csv"
    data.write_text("10,3\\n7,1\\n")
    proc = run(["python", "cli.py", str(data)])
    assert (proc.returncode, proc.stdout) == (0, "37\\n")


def test_every_comment_ticked_and_kept():
    lines = workspace_text("REVIEW.md").splitlines()
    ticked = [line for line in lines if line.startswith("- [x] ")]
    assert ticked == [line.replace("- [ ] ", "- [x] ", 1) for line in REVIEW]
    assert not [line for line in lines if re.match(r"- \\[ \\]", line)]
"""


class AddressReview(Template):
    """Address four review comments on a change (a refactor, a check, a named constant, an
    error message) across a module and its CLI, and tick each in `REVIEW.md`."""

    name: ClassVar[str] = "address_review"
    category: ClassVar[Category] = Category.CODE_REVIEW
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "constant")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=100,
            heldout=25,
            phrasing=list(PHRASINGS),
        )
        return draw_names(self.name, choices, {"constant": CONSTANTS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [REVIEW_FILE, f"{params['module']}.py", "cli.py"]

    def _files(
        self,
        params: Params,
        *,
        module: bool = False,
        cli: bool = False,
        review: bool = False,
        check_in_loop: bool = False,
    ) -> dict[str, str]:
        """The three files, with the module's comments addressed (`module`), the CLI's
        (`cli`), the comments ticked (`review`); `check_in_loop`: the quantity checked in
        the order's loop instead of in `line_total`."""
        mod, fn, const = params["module"], params["function"], params["constant"]
        source = ORDER_MODULE.format(
            fn=fn,
            constant=ORDER_CONSTANT.format(const=const) if module else "",
            check=ORDER_CHECK if module and not check_in_loop else "",
            limit=const if module else "100",
            line="line_total(each, qty)" if module else "each * qty",
        )
        if check_in_loop:
            loop = "for each, qty in lines:\n"
            source = source.replace(loop, loop + ORDER_CHECK.replace("    ", "        ", 2))
        items = "".join(line + "\n" for line in self._comments(params, ticked=review))
        return {
            f"{mod}.py": source,
            "cli.py": ORDER_CLI.format(
                mod=mod, fn=fn, read=ORDER_READ_CHECKED if cli else ORDER_READ
            ),
            REVIEW_FILE: ORDER_REVIEW.format(items=items),
        }

    def _comments(self, params: Params, *, ticked: bool) -> list[str]:
        mod, fn, const = params["module"], params["function"], params["constant"]
        source = ORDER_MODULE.format(fn=fn, constant="", check="", limit="100", line="each * qty")
        cli = ORDER_CLI.format(mod=mod, fn=fn, read=ORDER_READ)
        box = "- [x]" if ticked else "- [ ]"
        return [
            f"{box} {mod}.py:{line_of(source, 'subtotal += each * qty')}: `{fn}` repeats the "
            "arithmetic of `line_total`; call it instead.",
            f"{box} {mod}.py:{line_of(source, 'return each * qty')}: a negative quantity goes "
            'through; raise `ValueError("negative quantity")`.',
            f"{box} {mod}.py:{line_of(source, 'if subtotal > 100')}: 100 is a magic number; name "
            f"it `{const}` at module level.",
            f"{box} cli.py:{line_of(cli, 'with open(path)')}: a missing file ends in a "
            "traceback; print `error: no such file: FILE` to stderr and exit with status 2.",
        ]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, const = params["module"], params["function"], params["constant"]
        files = self._files(params)
        files[f"{VISIBLE_TESTS_DIR}/test_review.py"] = ORDER_VISIBLE.format(
            mod=mod, fn=fn, const=const
        )
        tests = {
            f"{GRADING_DIR}/test_task.py": ORDER_TESTS.format(
                mod=mod, fn=fn, const=const, review=self._comments(params, ticked=False)
            )
        }
        instruction = [
            f"Address every comment in `{REVIEW_FILE}` (on `{mod}.py` and `cli.py`) and tick "
            "each one you addressed.",
            "A reviewer left comments on this change. Address each of them and mark it done "
            "(`- [x]`) in the review file.",
            f"Work through the review in `{REVIEW_FILE}`: make every change it asks for, then "
            "tick the comments.",
        ][params["phrasing"]]
        return instruction, files, tests, self._edits(params)

    def _edits(self, params: Params, **after: bool) -> list[Edit]:
        done = {"module": True, "cli": True, "review": True, **after}
        return diff_edits(self._files(params), self._files(params, **done))

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Every comment ticked with only the CLI fixed; every change made but nothing
        ticked; the quantity checked in the order's loop instead of in `line_total`."""
        return [
            self._edits(params, module=False),
            self._edits(params, review=False),
            self._edits(params, check_in_loop=True),
        ]
