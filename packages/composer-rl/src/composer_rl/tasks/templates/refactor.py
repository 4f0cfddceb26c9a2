"""Refactors: behaviour stays, structure changes (the tests check both).

The structure is checked on the workspace's text, parsed with `ast` in the grader (never
imported there); the behaviour through `workspace_probe`.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    HIDDEN_TEST_PATH,
    cached_space,
    diff_edits,
    draw_names,
    hidden_test,
    visible_test_path,
)
from composer_rl.tasks.templates.vocab import CLASSES, CONSTANTS, FUNCTIONS, MODULES, PARAMS


class ExtractConstant(Template):
    """Move a magic number into a named module-level constant."""

    name: ClassVar[str] = "extract_constant"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "constant")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=1528,
            heldout=392,
            value=[12, 17, 24, 31, 45],
            phrasing=("explicit", "unnamed", "refactor"),
        )
        return draw_names(self.name, choices, {"constant": CONSTANTS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, const, k = (
            params["module"],
            params["function"],
            params["constant"],
            params["value"],
        )
        path = f"{mod}.py"
        source = f"def {fn}(x):\n    return x * {k}\n"
        visible = (
            f"import inspect\n\nimport {mod}\n\n\n"
            f"def test_{fn}_keeps_its_result():\n"
            f'    assert {mod}.{fn}(2) == {2 * k}, "{fn}(2) should still be 2 * {k} = {2 * k}"\n\n\n'
            "def test_constant_is_defined():\n"
            f'    assert getattr({mod}, "{const}", None) == {k}, '
            f'"{path} should define {const} = {k} at module level"\n\n\n'
            f"def test_{fn}_uses_the_constant():\n"
            f'    assert "{k}" not in inspect.getsource({mod}.{fn}), '
            f'"{fn} should use {const}, not the literal {k}"\n'
        )
        tests = hidden_test(
            f"def test_constant_value():\n"
            f'    assert evaluate("{mod}.{const}", imports=["{mod}"]) == {k}\n\n\n'
            f"def test_{fn}_behaviour():\n"
            f'    assert call("{mod}", "{fn}", 3) == {3 * k}\n'
            f'    assert call("{mod}", "{fn}", 0) == 0\n'
            f'    assert call("{mod}", "{fn}", -1) == {-k}\n\n\n'
            "def test_the_literal_is_gone():\n"
            f'    tree = ast.parse(workspace_text("{path}"))\n'
            "    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]\n"
            f'    body = [n for n in defs if n.name == "{fn}"]\n'
            "    assert len(body) == 1\n"
            "    inside = list(ast.walk(body[0]))\n"
            f"    assert not any(isinstance(n, ast.Constant) and n.value == {k} for n in inside)\n"
            f'    assert "{const}" in {{n.id for n in inside if isinstance(n, ast.Name)}}\n'
            "    top = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets\n"
            "           if isinstance(t, ast.Name)]\n"
            f'    assert "{const}" in top\n',
            imports="import ast",
        )
        instruction = {
            "explicit": (
                f"In `{path}`, move the number {k} used by `{fn}` into a module-level "
                f"constant named `{const}` and use it."
            ),
            "unnamed": (
                f"`{fn}` multiplies by the magic number {k}. Give it a name: define a "
                f"module-level constant `{const}` and use it in `{fn}`."
            ),
            "refactor": (
                f"Refactor `{path}`: replace the literal {k} in `{fn}` with a constant "
                f"`{const}` defined at the top of the module. Behaviour must not change."
            ),
        }[params["phrasing"]]
        edit = Edit(path=path, new=f"{const} = {k}\n\n\ndef {fn}(x):\n    return x * {const}\n")
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The constant defined but the literal kept; the constant one off."""
        mod, fn, const, k = (
            params["module"],
            params["function"],
            params["constant"],
            params["value"],
        )
        path = f"{mod}.py"
        return [
            [Edit(path=path, new=f"{const} = {k}\n\n\ndef {fn}(x):\n    return x * {k}\n")],
            [Edit(path=path, new=f"{const} = {k + 1}\n\n\ndef {fn}(x):\n    return x * {const}\n")],
        ]


class RenameFunction(Template):
    """Rename a function and its one caller in another module."""

    name: ClassVar[str] = "rename_function"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "old", "new", "caller")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "old": FUNCTIONS},
            train=200,
            heldout=56,
            phrasing=("explicit", "unnamed", "tests"),
        )
        return draw_names(self.name, choices, {"new": FUNCTIONS, "caller": MODULES}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", f"{params['caller']}.py"]

    def _caller(self, params: Params, name: str) -> str:
        return f"from {params['module']} import {name}\n\n\ndef main():\n    return {name}(2, 3)\n"

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, old, new, caller = params["module"], params["old"], params["new"], params["caller"]
        path = f"{mod}.py"
        visible = (
            f"import {caller}\nimport {mod}\n\n\n"
            f"def test_{new}_is_defined():\n"
            f'    assert hasattr({mod}, "{new}"), "{path} should define {new} (the new name '
            f'of {old})"\n'
            f"    assert {mod}.{new}(1, 2) == 12\n\n\n"
            f"def test_{old}_is_gone():\n"
            f'    assert not hasattr({mod}, "{old}"), "{path} should no longer define {old}"\n\n\n'
            f"def test_{caller}_main():\n"
            f"    assert {caller}.main() == 23\n"
        )
        files = {
            path: f"def {old}(a, b):\n    return a * 10 + b\n",
            f"{caller}.py": self._caller(params, old),
            visible_test_path(mod): visible,
        }
        tests = hidden_test(
            "def test_renamed():\n"
            f'    assert call("{mod}", "{new}", 4, 5) == 45\n'
            f'    assert call("{mod}", "{new}", 0, 7) == 7\n'
            f'    assert evaluate("hasattr({mod}, \'{old}\')", imports=["{mod}"]) is False\n\n\n'
            "def test_caller_uses_the_new_name():\n"
            f'    assert call("{caller}", "main") == 23\n'
            f'    tree = ast.parse(workspace_text("{caller}.py"))\n'
            "    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}\n"
            "    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)\n"
            "             for a in n.names}\n"
            f'    assert "{old}" not in used and "{new}" in used\n',
            imports="import ast",
        )
        instruction = {
            "explicit": (
                f"Rename the function `{old}` in `{path}` to `{new}` and update its callers."
            ),
            "unnamed": (
                f"Rename the function `{old}` to `{new}` everywhere in the repository; keep "
                "no alias under the old name."
            ),
            "tests": (
                f"`{old}` in `{path}` should be called `{new}`, as the tests already expect. "
                "Rename it and update every caller."
            ),
        }[params["phrasing"]]
        edits = [
            Edit(path=path, old=f"def {old}(", new=f"def {new}("),
            Edit(path=f"{caller}.py", new=self._caller(params, new)),
        ]
        return instruction, files, tests, edits

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The definition renamed but not its caller; an alias left under the old name."""
        mod, old, new, caller = params["module"], params["old"], params["new"], params["caller"]
        path = f"{mod}.py"
        renamed = f"def {new}(a, b):\n    return a * 10 + b\n"
        return [
            [Edit(path=path, new=renamed)],
            [
                Edit(path=path, new=f"{renamed}\n\n{old} = {new}\n"),
                Edit(path=f"{caller}.py", new=self._caller(params, new)),
            ],
        ]


FIELD_MODELS = """from dataclasses import dataclass


@dataclass
class {record}:
    name: str
    {field}: int
    unit: str = "kg"

    def label(self):
        return f"{{self.name}}: {{self.{field}}} {{self.unit}}"
"""
FIELD_SERIALIZE = '''"""{record} records to and from JSON-ready dicts."""

from models import {record}


def to_dict(record):
    return {{"name": record.name, "{key}": record.{field}, "unit": record.unit}}


def from_dict(data):
    return {record}(name=data["name"], {field}=data["{key}"], unit=data.get("unit", "kg"))
'''
FIELD_LOGIC = '''def largest(records):
    """The name of the record with the largest {field}."""
    return max(records, key=lambda r: r.{field}).name


def {fn}(records):
    """The sum of the records' {field}."""
    return sum(r.{field} for r in records)


def above(records, limit):
    """Names of the records whose {field} is over `limit`."""
    return [r.name for r in records if r.{field} > limit]
'''
FIELD_ROWS = [("crate", 12, "kg"), ("drum", 30, "kg"), ("sack", 7, "lb"), ("case", 21, "kg")]
"""The fixture's records (name, the renamed field, unit)."""


def _fixture(key: str) -> str:
    rows = [f'  {{"name": "{n}", "{key}": {v}, "unit": "{u}"}}' for n, v, u in FIELD_ROWS]
    return "[\n" + ",\n".join(rows) + "\n]\n"


FIELD_VISIBLE = '''"""{record} records, loaded from the fixture through the serializer."""

import dataclasses
import json
from pathlib import Path

import models
from serialize import from_dict, to_dict
from {mod} import above, largest, {fn}

FIXTURE = Path(__file__).parent / "fixtures" / "{mod}.json"


def records():
    return [from_dict(data) for data in json.loads(FIXTURE.read_text())]


def test_the_field_is_renamed():
    names = [f.name for f in dataclasses.fields(models.{record})]
    assert names == ["name", "{new}", "unit"], f"{record}'s fields are {{names}}: {old} becomes {new}"


def test_the_serialized_form_uses_the_new_name():
    data = json.loads(FIXTURE.read_text())
    assert all("{new}" in row for row in data), "the fixture's records should have {new!r} keys"
    assert [to_dict(r) for r in records()] == data, "to_dict should give back the fixture's rows"


def test_the_logic():
    loaded = records()
    assert {fn}(loaded) == 70 and largest(loaded) == "drum" and above(loaded, 20) == ["drum", "case"]
    assert loaded[2].label() == "sack: 7 lb"
'''

FIELD_TESTS = """import json
import re

from workspace_probe import ObjectValue, evaluate, workspace_text

IMPORTS = ["dataclasses", "models", "serialize", {mod!r}]
ROWS = {rows!r}
BUILT = "[models.{record}(n, v, u) for n, v, u in " + repr(ROWS) + "]"


def test_fields():
    fields = evaluate("[f.name for f in dataclasses.fields(models.{record})]", imports=IMPORTS)
    assert fields == ["name", {new!r}, "unit"]


def test_serializer():
    assert evaluate("[serialize.to_dict(r) for r in " + BUILT + "]", imports=IMPORTS) == [
        {{"name": n, {new!r}: v, "unit": u}} for n, v, u in ROWS
    ]
    loaded = evaluate("serialize.from_dict({{'name': 'pail', {new!r}: 4}})", imports=IMPORTS)
    assert loaded == ObjectValue({record!r}, {{"name": "pail", {new!r}: 4, "unit": "kg"}})


def test_logic():
    assert evaluate({mod!r} + "." + {fn!r} + "(" + BUILT + ")", imports=IMPORTS) == {summed}
    assert evaluate({mod!r} + ".largest(" + BUILT + ")", imports=IMPORTS) == {largest!r}
    assert evaluate({mod!r} + ".above(" + BUILT + ", 9)", imports=IMPORTS) == {above!r}
    assert evaluate(BUILT + "[0].label()", imports=IMPORTS) == {label!r}


def test_fixture_renamed():
    rows = json.loads(workspace_text("tests/fixtures/{mod}.json"))
    assert [(r["name"], r[{new!r}], r["unit"]) for r in rows] == {fixture!r}
    assert not any({old!r} in r for r in rows)


def test_old_name_gone():
    for path in ["models.py", "serialize.py", {mod!r} + ".py"]:
        assert not re.search(r"\\b{old}\\b", workspace_text(path)), path
"""

FIELD_HIDDEN_ROWS = [("tin", 5, "kg"), ("jug", 11, "lb"), ("bin", 8, "kg")]


class RenameField(Template):
    """Rename a record's field across its model, serializer, logic and test fixtures."""

    name: ClassVar[str] = "rename_field"
    category: ClassVar[Category] = Category.REFACTOR
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("record", "old", "new", "module", "function")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"record": CLASSES, "old": PARAMS},
            train=100,
            heldout=25,
            phrasing=("explicit", "unnamed", "fixtures"),
        )
        pools = {"new": PARAMS, "module": MODULES, "function": FUNCTIONS}
        return draw_names(self.name, choices, pools, "record")

    def context_files(self, params: Params) -> list[str]:
        mod = params["module"]
        return ["models.py", "serialize.py", f"{mod}.py", f"tests/fixtures/{mod}.json"]

    def _files(self, params: Params, field: str, key: str, fixture: str) -> dict[str, str]:
        """The four files with the attribute `field`, the serialized key `key` and the
        fixture's key `fixture`."""
        record, mod, fn = params["record"], params["module"], params["function"]
        return {
            "models.py": FIELD_MODELS.format(record=record, field=field),
            "serialize.py": FIELD_SERIALIZE.format(record=record, field=field, key=key),
            f"{mod}.py": FIELD_LOGIC.format(fn=fn, field=field),
            f"tests/fixtures/{mod}.json": _fixture(fixture),
        }

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        record, old, new = params["record"], params["old"], params["new"]
        mod, fn = params["module"], params["function"]
        files = self._files(params, old, old, old)
        files[visible_test_path(mod)] = FIELD_VISIBLE.format(
            record=record, old=old, new=new, mod=mod, fn=fn
        )
        rows = FIELD_HIDDEN_ROWS
        tests = {
            HIDDEN_TEST_PATH: FIELD_TESTS.format(
                mod=mod,
                fn=fn,
                record=record,
                old=old,
                new=new,
                rows=rows,
                summed=sum(v for _, v, _ in rows),
                largest=max(rows, key=lambda r: r[1])[0],
                above=[n for n, v, _ in rows if v > 9],
                label=f"{rows[0][0]}: {rows[0][1]} {rows[0][2]}",
                fixture=FIELD_ROWS,
            )
        }
        instruction = {
            "explicit": (
                f"Rename the field `{old}` of `{record}` (`models.py`) to `{new}` in the "
                f"serializer, `{mod}.py` and the test fixtures too."
            ),
            "unnamed": (
                f"Rename `{record}.{old}` to `{new}` everywhere: the model, the code that uses "
                "it, the serialized form and the test fixtures. Behaviour stays the same."
            ),
            "fixtures": (
                f"`{record}` should call `{old}` `{new}`, as the tests already expect. Rename "
                f"it throughout, including the JSON key and `tests/fixtures/{mod}.json`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, self._edits(params, new, new, new)

    def _edits(self, params: Params, field: str, key: str, fixture: str) -> list[Edit]:
        old = params["old"]
        return diff_edits(
            self._files(params, old, old, old), self._files(params, field, key, fixture)
        )

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The model alone renamed; everything but the fixture; the attribute renamed but
        the serialized key kept."""
        old, new = params["old"], params["new"]
        models = [e for e in self._edits(params, new, new, new) if e.path == "models.py"]
        return [
            models,
            self._edits(params, new, new, old),
            self._edits(params, new, old, old),
        ]
