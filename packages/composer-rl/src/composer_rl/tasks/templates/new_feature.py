"""New features: implement a stub, add a function that does not exist yet, or add a command
to a small CLI (a new module, the parser, the dispatch and the README).

The repository's tests already call the new code (and fail until it exists, saying what
they expected); the hidden tests check other inputs through `workspace_probe`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from composer_rl.tasks.model import VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    HIDDEN_TEST_PATH,
    cached_space,
    diff_edits,
    hidden_test,
    stub_line,
    visible_test_path,
)
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

LIST_OPERATIONS = {
    "sum": ("sum", "sum(xs)"),
    "largest": ("largest element", "max(xs)"),
    "smallest": ("smallest element", "min(xs)"),
    "count": ("number of elements", "len(xs)"),
    "first": ("first element", "xs[0]"),
    "last": ("last element", "xs[-1]"),
}
"""operation: (what the docstring calls it, the expression that computes it)."""

LIST_MISTAKES = {
    "sum": ["len(xs)"],
    "largest": ["min(xs)", "xs[-1]"],
    "smallest": ["max(xs)", "xs[0]"],
    "count": ["sum(xs)"],
    "first": ["xs[-1]", "xs[1]"],
    "last": ["xs[0]", "xs[-2]"],
}
"""Plausible wrong expressions per operation: the opposite one, the element at the wrong
end, the first element for the smallest."""

VISIBLE_LIST = [5, 9, 2, 6]
"""The visible test's list: every operation gives a different value on it, so every
mistake above fails the visible test."""

HIDDEN_LISTS: list[list[int]] = [[4, 9, 2], [5], [3, 1, 8, 6], [-2, -7]]

STRING_OPERATIONS = {
    "upper": ("`text` in upper case", "text.upper()"),
    "lower": ("`text` in lower case", "text.lower()"),
    "reversed": ("`text` reversed", "text[::-1]"),
    "stripped": ("`text` without surrounding spaces", "text.strip()"),
    "doubled": ("`text` repeated twice", "text + text"),
}

STRING_MISTAKES = {
    "upper": "text.lower()",
    "lower": "text.upper()",
    "reversed": "reversed(text)",
    "stripped": "text.lstrip()",
    "doubled": 'text + " " + text',
}

VISIBLE_TEXT = "  Big Sky "
HIDDEN_TEXTS = (" Hello World ", "abc", "Mixed Case", "")


def _value(expr: str, **names: Any) -> Any:
    return eval(expr, {}, names)  # the templates' own fixed expressions, never task input


class ImplementStub(Template):
    """A documented stub raises NotImplementedError; replace it with one expression."""

    name: ClassVar[str] = "implement_stub"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=304,
            heldout=80,
            operation=list(LIST_OPERATIONS),
            phrasing=("explicit", "unnamed", "docstring"),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["operation"]
        desc, expr = LIST_OPERATIONS[op]
        path = f"{mod}.py"
        source = f'def {fn}(xs):\n    """Return the {desc} of xs."""\n    {stub_line(fn)}\n'
        value = _value(expr, xs=VISIBLE_LIST)
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}():\n"
            f"    assert {fn}({VISIBLE_LIST!r}) == {value!r}, "
            f'"{fn}({VISIBLE_LIST!r}) should be the {desc}: {value!r}"\n'
        )
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {xs!r}) == {_value(expr, xs=xs)!r}\n'
            for xs in HIDDEN_LISTS
        )
        tests = hidden_test(f"def test_{fn}():\n{checks}")
        instruction = {
            "explicit": f"Implement `{fn}(xs)` in `{path}`: return the {desc} of the list `xs`.",
            "unnamed": (
                f"`{fn}(xs)` is a stub that raises NotImplementedError. Make it return the "
                f"{desc} of the list `xs`."
            ),
            "docstring": f"Implement the stub `{fn}` in `{path}` as its docstring says.",
        }[params["phrasing"]]
        edit = Edit(path=path, old=stub_line(fn), new=f"return {expr}")
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        path, fn = f"{params['module']}.py", params["function"]
        return [
            [Edit(path=path, old=stub_line(fn), new=f"return {wrong}")]
            for wrong in LIST_MISTAKES[params["operation"]]
        ]


class AddStringFunction(Template):
    """Add a new function next to an existing one (the file is rewritten whole)."""

    name: ClassVar[str] = "add_string_function"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=96,
            heldout=24,
            operation=list(STRING_OPERATIONS),
            phrasing=("explicit", "unnamed", "tests"),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def _with(self, params: Params, expr: str) -> str:
        return f"{SOURCE}\n\ndef {params['function']}(text):\n    return {expr}\n"

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["operation"]
        desc, expr = STRING_OPERATIONS[op]
        path = f"{mod}.py"
        value = _value(expr, text=VISIBLE_TEXT)
        visible = (
            f"import {mod}\n\n\n"
            "def test_word_count():\n"
            f'    assert {mod}.word_count("one two three") == 3\n\n\n'
            f"def test_{fn}():\n"
            f'    assert hasattr({mod}, "{fn}"), "{path} should define a function {fn}(text)"\n'
            f"    assert {mod}.{fn}({VISIBLE_TEXT!r}) == {value!r}, "
            f'"{fn}({VISIBLE_TEXT!r}) should be {desc}: {value!r}"\n'
        )
        checks = "".join(
            f'    assert call("{mod}", "{fn}", {text!r}) == {_value(expr, text=text)!r}\n'
            for text in HIDDEN_TEXTS
        )
        tests = hidden_test(
            f"def test_{fn}():\n{checks}\n\n"
            "def test_word_count_still_works():\n"
            f'    assert call("{mod}", "word_count", "a b") == 2\n'
        )
        instruction = {
            "explicit": f"Add a function `{fn}(text)` to `{path}` that returns {desc}.",
            "unnamed": f"Next to `word_count`, add a function `{fn}(text)` that returns {desc}.",
            "tests": (
                f"The tests of `{path}` expect a function `{fn}(text)` that returns {desc}. Add it."
            ),
        }[params["phrasing"]]
        edit = Edit(path=path, new=self._with(params, expr))
        return instruction, {path: SOURCE, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        path = f"{params['module']}.py"
        return [[Edit(path=path, new=self._with(params, STRING_MISTAKES[params["operation"]]))]]


SOURCE = "def word_count(text):\n    return len(text.split())\n"
"""The module `add_string_function` adds to."""


STORE = '''"""The inventory: a JSON list of {"name", "kind", "qty", "each"} items."""

import json
from pathlib import Path


def load(path):
    file = Path(path)
    return json.loads(file.read_text()) if file.exists() else []


def save(path, items):
    Path(path).write_text(json.dumps(items, indent=2) + "\\n")
'''
COMMANDS = '''{imports}from store import load, save


def show(args):
    """List every item: 'name (kind): qty x each'."""
    for item in load(args.file):
        print(f"{{item['name']}} ({{item['kind']}}): {{item['qty']}} x {{item['each']}}")
    return 0


def add(args):
    """Add an item."""
    items = load(args.file)
    items.append({{"name": args.name, "kind": args.kind, "qty": args.qty, "each": args.each}})
    save(args.file, items)
    print(f"added {{args.name}}")
    return 0
{command}'''
COMMAND = '''

def {fn}(args):
    """Print the pieces and worth of each kind, then of all items."""
    for line in summary_lines(load(args.file)):
        print(line)
    return 0
'''
INVENTORY_CLI = '''"""python cli.py [--file FILE] COMMAND ...: the inventory from the command line."""

import argparse
import sys

import commands


def parser():
    top = argparse.ArgumentParser(prog="cli.py")
    top.add_argument("--file", default="items.json", help="the inventory file")
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="list every item")
{command}    new = sub.add_parser("add", help="add an item")
    new.add_argument("name")
    new.add_argument("kind")
    new.add_argument("qty", type=int)
    new.add_argument("each", type=int)
    return top


def main(argv=None):
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return getattr(commands, args.command)(args)


if __name__ == "__main__":
    raise SystemExit(main())
'''
INVENTORY_README = """# Inventory

Items are kept in a JSON file (`--file`, default `items.json`).

    python cli.py show                      # list every item
    python cli.py add NAME KIND QTY EACH    # add an item
{command}"""
SUMMARY = '''"""Summaries of the inventory."""


def by_kind(items):
    """{{kind: (pieces, worth)}} over `items`, kinds in {order}."""
    sums = {{}}
    for item in items:
        pieces, worth = sums.get(item["kind"], (0, 0))
        sums[item["kind"]] = (pieces + item["qty"], worth + item["qty"] * {worth})
    return {sums}


def summary_lines(items):
    """'kind: N pieces, worth W' for each kind, then for all items."""
    lines = [f"{{kind}}: {{n}} pieces, worth {{w}}" for kind, (n, w) in by_kind(items).items()]
    pieces = sum(item["qty"] for item in items)
    worth = sum(item["qty"] * item["each"] for item in items)
    lines.append(f"all: {{pieces}} pieces, worth {{worth}}")
    return lines
'''

COMMAND_VISIBLE = '''"""The inventory's commands, run as a user runs them."""

import json

from cli import main

ITEMS = {items!r}


def run_cli(tmp_path, capsys, *command):
    path = tmp_path / "items.json"
    path.write_text(json.dumps(ITEMS))
    try:
        main(["--file", str(path), *command])
    except SystemExit as exc:
        said = (capsys.readouterr().err.strip().splitlines() or [""])[-1]
        raise AssertionError(f"cli.py {{' '.join(command)}} exits {{exc.code}}: {{said}}") from None
    return capsys.readouterr().out.splitlines()


def test_show(tmp_path, capsys):
    assert run_cli(tmp_path, capsys, "show")[0] == {first!r}


def test_{fn}_sums_each_kind_then_all(tmp_path, capsys):
    assert run_cli(tmp_path, capsys, "{fn}") == {lines!r}, (
        "{fn} should print 'kind: N pieces, worth W' per kind in sorted order (W: the sum "
        "of qty * each), then the same for all items"
    )
'''

COMMAND_TESTS = """import json

from workspace_probe import run, workspace_text

ITEMS = {items!r}


def _run(tmp_path, *command, items=ITEMS):
    path = tmp_path / "stock.json"
    if items is not None:
        path.write_text(json.dumps(items))
    return run(["python", "cli.py", "--file", str(path), *command])


def test_{fn}(tmp_path):
    proc = _run(tmp_path, {fn!r})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == {lines!r}


def test_{fn}_of_an_empty_inventory(tmp_path):
    proc = _run(tmp_path, {fn!r}, items=None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["all: 0 pieces, worth 0"]


def test_the_other_commands_still_work(tmp_path):
    assert _run(tmp_path, "add", "saw", "tools", "1", "9", items=[]).returncode == 0
    proc = _run(tmp_path, "show", items=None)
    assert proc.stdout.splitlines() == ["saw (tools): 1 x 9"], proc.stderr


def test_it_is_listed_in_the_help_and_the_readme():
    assert {fn!r} in run(["python", "cli.py", "--help"]).stdout
    assert {fn!r} in workspace_text("README.md")
"""

VISIBLE_ITEMS = [
    {"name": "bolt", "kind": "parts", "qty": 40, "each": 2},
    {"name": "rake", "kind": "garden", "qty": 2, "each": 15},
    {"name": "nut", "kind": "parts", "qty": 25, "each": 1},
]
HIDDEN_ITEMS = [
    {"name": "drill", "kind": "tools", "qty": 2, "each": 60},
    {"name": "glue", "kind": "supplies", "qty": 6, "each": 4},
    {"name": "hammer", "kind": "tools", "qty": 3, "each": 12},
    {"name": "lamp", "kind": "electric", "qty": 1, "each": 25},
    {"name": "tape", "kind": "supplies", "qty": 10, "each": 3},
]


def _summary(items: list[dict[str, Any]]) -> list[str]:
    kinds: dict[str, tuple[int, int]] = {}
    for item in items:
        pieces, worth = kinds.get(item["kind"], (0, 0))
        kinds[item["kind"]] = (pieces + item["qty"], worth + item["qty"] * item["each"])
    lines = [f"{k}: {n} pieces, worth {w}" for k, (n, w) in sorted(kinds.items())]
    pieces = sum(item["qty"] for item in items)
    worth = sum(item["qty"] * item["each"] for item in items)
    return [*lines, f"all: {pieces} pieces, worth {worth}"]


class AddCommand(Template):
    """A new command for an inventory CLI: its logic in a new module, registered with the
    parser, dispatched, and listed in the README."""

    name: ClassVar[str] = "add_command"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=100,
            heldout=25,
            phrasing=("explicit", "unnamed", "readme"),
        )

    def context_files(self, params: Params) -> list[str]:
        return ["cli.py", "commands.py", "README.md"]

    def _files(
        self, params: Params, *, new: bool, worth: str = 'item["each"]', ordered: bool = True
    ) -> dict[str, str]:
        """The repository before (`new` False) or after the command is added."""
        mod, fn = params["module"], params["function"]
        files = {
            "store.py": STORE,
            "commands.py": COMMANDS.format(
                imports=f"from {mod} import summary_lines\n" if new else "",
                command=COMMAND.format(fn=fn) if new else "",
            ),
            "cli.py": INVENTORY_CLI.format(
                command=f'    sub.add_parser("{fn}", help="pieces and worth per kind")\n'
                if new
                else ""
            ),
            "README.md": INVENTORY_README.format(
                command=f"    python cli.py {fn}{' ' * (26 - len(fn))}# pieces and worth per kind\n"
                if new
                else ""
            ),
        }
        if new:
            files[f"{mod}.py"] = SUMMARY.format(
                worth=worth,
                order="sorted order" if ordered else "the order they first come",
                sums="dict(sorted(sums.items()))" if ordered else "sums",
            )
        return files

    def _edits(self, params: Params, **after: Any) -> list[Edit]:
        return diff_edits(self._files(params, new=False), self._files(params, new=True, **after))

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        files = self._files(params, new=False)
        files[f"{VISIBLE_TESTS_DIR}/test_cli.py"] = COMMAND_VISIBLE.format(
            fn=fn,
            items=VISIBLE_ITEMS,
            first="bolt (parts): 40 x 2",
            lines=_summary(VISIBLE_ITEMS),
        )
        tests = {
            HIDDEN_TEST_PATH: COMMAND_TESTS.format(
                fn=fn, items=HIDDEN_ITEMS, lines=_summary(HIDDEN_ITEMS)
            )
        }
        instruction = {
            "explicit": (
                f"Add a command `{fn}` to `cli.py`, its logic in a new `{mod}.py`: per kind, "
                "sorted, `kind: N pieces, worth W` (W: sum of qty * each), then `all: ...`."
            ),
            "unnamed": (
                f"Add a `{fn}` command: for each kind, sorted, print `kind: N pieces, worth W` "
                "(W is the sum of qty * each), then the same for `all`. Document it."
            ),
            "readme": (
                f"The inventory needs a `{fn}` command: per kind (sorted) `kind: N pieces, "
                "worth W`, W the sum of qty * each, then an `all:` line. List it in `README.md`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, self._edits(params)

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Each kind's worth without the quantity; the command written but never given to
        the parser; the kinds in the order they first come."""
        unregistered = [e for e in self._edits(params) if e.path != "cli.py"]
        return [
            self._edits(params, worth="1"),
            unregistered,
            self._edits(params, ordered=False),
        ]
