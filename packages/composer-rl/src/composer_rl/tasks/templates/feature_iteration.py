"""Iterating on a feature: an existing function grows an option, or a report tool a
command-line option through its parser, settings, report and README (`add_cli_option`).

The repository's own tests (`tests/test_<module>.py`, `tests/test_cli.py`) already use the
option, so they fail until it exists and say what it should do; the hidden tests check
other inputs and the option passed by keyword (or on the command line, run as a user runs
it).
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    HIDDEN_TEST_PATH,
    cached_space,
    diff_edits,
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


OPTION_CLI = '''"""python cli.py FILE [--sep SEP]{usage}: the report of FILE's name,{param} rows."""

import argparse
import sys

from config import Config
from {mod} import {fn}
{helper}

def parse_args(argv):
    parser = argparse.ArgumentParser(prog="{mod}")
    parser.add_argument("path", help="CSV file of name,{param} rows")
    parser.add_argument("--sep", default=",", help="field separator (default ,)")
{option}    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = Config.from_args(args)
    with open(args.path) as handle:
        rows = [line.strip().split(config.sep) for line in handle if line.strip()]
    for line in {fn}(rows, config):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''
OPTION_HELPER = '''

def at_least_one(text):
    """argparse type: an int of at least 1."""
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number
'''
OPTION_ARGUMENT = (
    '    parser.add_argument(\n        "--top", type={kind}, default=None,\n'
    '        help="only the N rows with the largest {param}, largest first",\n    )\n'
)
OPTION_CONFIG = '''from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """The report's settings, from the command line."""

    sep: str = ","{field}

    @classmethod
    def from_args(cls, args):
        return cls({kwargs})
'''
OPTION_REPORT = '''def {fn}(rows, config):
    """'name: {param}' lines for (name, {param}) rows, in file order{doc}."""
{body}    return [f"{{name}}: {{int(number)}}" for name, number in rows]
'''
OPTION_TOP = (
    "    if config.top is not None:\n"
    "        rows = sorted(rows, key=lambda row: {sign}int(row[1]))[: config.top]\n"
)
OPTION_README = """# {mod}

Prints the report of a CSV file of `name,{param}` rows.

    python cli.py FILE [--sep SEP]{usage}

Options:

- `--sep SEP`: the field separator (default `,`).
{bullet}"""
OPTION_BULLET = "- `--top N`: only the N rows with the largest {param}, largest first (N >= 1).\n"

OPTION_VISIBLE = '''"""The report's command line, run as a user runs it."""

import pytest

from cli import main

ROWS = {rows!r}


def report(tmp_path, capsys, *options):
    data = tmp_path / "data.csv"
    data.write_text("".join(f"{{name}},{{number}}\\n" for name, number in ROWS))
    try:
        main([str(data), *options])
    except SystemExit as exc:
        said = (capsys.readouterr().err.strip().splitlines() or [""])[-1]
        raise AssertionError(f"cli.py FILE {{' '.join(options)}} exits {{exc.code}}: {{said}}") from None
    return capsys.readouterr().out.splitlines()


def test_every_row_in_file_order_by_default(tmp_path, capsys):
    assert report(tmp_path, capsys) == {every!r}


def test_top_keeps_the_largest_first(tmp_path, capsys):
    assert report(tmp_path, capsys, "--top", "2") == {top!r}, (
        "--top 2 should print the 2 rows with the largest {param}, largest first"
    )


def test_top_must_be_at_least_one(tmp_path, capsys):
    with pytest.raises(AssertionError) as refused:
        report(tmp_path, capsys, "--top", "0")
    said = refused.exconly()
    assert "exits 2" in said and "at least 1" in said, (
        f"--top 0 should be refused with 'must be at least 1'; {{said}}"
    )
'''

OPTION_TESTS = """import pytest

from workspace_probe import run, workspace_text

ROWS = {rows!r}


def _report(tmp_path, *options):
    data = tmp_path / "input.csv"
    data.write_text("".join(f"{{name}};{{number}}\\n" for name, number in ROWS))
    return run(["python", "cli.py", str(data), "--sep", ";", *options])


def test_default_is_unchanged(tmp_path):
    proc = _report(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == {every!r}


@pytest.mark.parametrize("top", [1, 3, 9])
def test_top(tmp_path, top):
    proc = _report(tmp_path, "--top", str(top))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == {ranked!r}[:top]


@pytest.mark.parametrize("top", ["0", "-2"])
def test_top_below_one_is_refused(tmp_path, top):
    proc = _report(tmp_path, "--top", top)
    assert proc.returncode == 2 and "at least 1" in proc.stderr, proc.stderr


def test_the_readme_documents_it():
    assert "--top" in workspace_text("README.md")
"""

OPTION_VISIBLE_ROWS = [("oak", 12), ("ash", 30), ("elm", 7), ("fir", 21)]
OPTION_HIDDEN_ROWS = [("kiwi", 4), ("lime", 19), ("pear", 11), ("plum", 25), ("date", 2)]


def _option_lines(rows: list[tuple[str, int]], top: int | None = None) -> list[str]:
    if top is not None:
        rows = sorted(rows, key=lambda row: -row[1])[:top]
    return [f"{name}: {number}" for name, number in rows]


class AddCliOption(Template):
    """A `--top N` option through a report tool's parser, settings, report and README."""

    name: ClassVar[str] = "add_cli_option"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "param")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=100,
            heldout=25,
            phrasing=("explicit", "unnamed", "readme"),
        )
        return draw_names(self.name, choices, {"param": PARAMS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return ["cli.py", "config.py", f"{params['module']}.py", "README.md"]

    def _files(
        self, params: Params, *, top: bool, sign: str = "-", kind: str = "at_least_one"
    ) -> dict[str, str]:
        """The four files, before (`top` False) or after the option is added."""
        mod, fn, param = params["module"], params["function"], params["param"]
        usage = " [--top N]" if top else ""
        return {
            "cli.py": OPTION_CLI.format(
                mod=mod,
                fn=fn,
                param=param,
                usage=usage,
                helper=OPTION_HELPER if top and kind == "at_least_one" else "",
                option=OPTION_ARGUMENT.format(kind=kind, param=param) if top else "",
            ),
            "config.py": OPTION_CONFIG.format(
                field="\n    top: int | None = None" if top else "",
                kwargs="sep=args.sep, top=args.top" if top else "sep=args.sep",
            ),
            f"{mod}.py": OPTION_REPORT.format(
                fn=fn,
                param=param,
                doc="\n    (with `config.top`, the N largest only, largest first)" if top else "",
                body=OPTION_TOP.format(sign=sign) if top else "",
            ),
            "README.md": OPTION_README.format(
                mod=mod,
                param=param,
                usage=usage,
                bullet=OPTION_BULLET.format(param=param) if top else "",
            ),
        }

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, param = params["module"], params["function"], params["param"]
        files = self._files(params, top=False)
        files[f"{VISIBLE_TESTS_DIR}/test_cli.py"] = OPTION_VISIBLE.format(
            rows=OPTION_VISIBLE_ROWS,
            every=_option_lines(OPTION_VISIBLE_ROWS),
            top=_option_lines(OPTION_VISIBLE_ROWS, 2),
            param=param,
        )
        tests = {
            HIDDEN_TEST_PATH: OPTION_TESTS.format(
                rows=OPTION_HIDDEN_ROWS,
                every=_option_lines(OPTION_HIDDEN_ROWS),
                ranked=_option_lines(OPTION_HIDDEN_ROWS, len(OPTION_HIDDEN_ROWS)),
            )
        }
        instruction = {
            "explicit": (
                f"Add a `--top N` option to `cli.py`, kept in `Config` and applied in `{fn}` "
                f"({mod}.py): only the N rows with the largest {param}, largest first; N >= 1."
            ),
            "unnamed": (
                f"The report should take a `--top N` option: print only the N rows with the "
                f"largest {param}, largest first. Refuse N below 1. Document it."
            ),
            "readme": (
                f"Add a `--top N` option to the report (only the N rows with the largest "
                f"{param}, largest first; N must be at least 1) and list it in `README.md`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, self._edits(params)

    def _edits(self, params: Params, *, sign: str = "-", kind: str = "at_least_one") -> list[Edit]:
        """The option added (`sign` "" sorts smallest first; `kind` "int" takes any N)."""
        before = self._files(params, top=False)
        return diff_edits(before, self._files(params, top=True, sign=sign, kind=kind))

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The smallest rows first; the option parsed and kept but never applied; N below
        1 not refused."""
        report = f"{params['module']}.py"
        unapplied = [e for e in self._edits(params) if e.path != report]
        return [
            self._edits(params, sign=""),
            unapplied,
            self._edits(params, kind="int"),
        ]
