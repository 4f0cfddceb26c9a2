"""Testing: write tests that pass on the real code and catch mutants.

The repository already has a tests folder, testing another function of the module (the
agent adds its tests there, or one file a module for `write_package_tests`; what is there
passes before and after). The hidden grader
copies every test file under `tests/` out of the workspace as text (`workspace_text`),
next to its own copy of the real module or a mutant, and runs pytest on that copy in a
fresh isolated interpreter (`workspace_probe.run`): the agent's tests never run in the
grader's process, and the module they test is the grader's, not the workspace's.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    cached_space,
    diff_edits,
    draw_names,
    hidden_test,
    visible_test_path,
)
from composer_rl.tasks.templates.debugging import _apply
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

MUTANTS = {"+": "-", "-": "+", "*": "+"}
"""The operator the grader swaps in to check that the agent's tests catch a change."""

GRADER = """ORIGINAL = {original!r}
MUTANTS = {mutants!r}


def _suite():
    listed = evaluate("sorted(os.listdir({tests!r}))", imports=["os"])
    names = [n for n in listed if re.fullmatch(r"[A-Za-z0-9_]+\\.py", n)]
    return {{n: workspace_text({tests!r} + "/" + n) for n in names}}


def _run(tmp_path, source):
    folder = tmp_path / {tests!r}
    folder.mkdir()
    for name, text in _suite().items():
        (folder / name).write_text(text)
    (tmp_path / "{module}.py").write_text(source)
    command = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", {tests!r}]
    return run(command, cwd=tmp_path).returncode


def test_the_tests_call_{function}():
    used = set()
    for text in _suite().values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.alias):
                used.add(node.name)
    assert "{function}" in used


def test_passes_on_the_real_code(tmp_path):
    assert _run(tmp_path, ORIGINAL) == 0


@pytest.mark.parametrize("mutant", range(len(MUTANTS)))
def test_fails_on_a_mutant(tmp_path, mutant):
    assert _run(tmp_path, MUTANTS[mutant]) != 0
"""


class WriteTests(Template):
    """The hidden grader runs the agent's tests against the real code and two mutants."""

    name: ClassVar[str] = "write_tests"
    category: ClassVar[Category] = Category.TESTING
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "other")
    agent_writes_tests: ClassVar[bool] = True
    """The repository's visible tests test another function and pass before and after:
    the tests this task is about are the agent's to write."""

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=162,
            heldout=30,
            op=list(MUTANTS),
            phrasing=("explicit", "unnamed", "values"),
        )
        return draw_names(self.name, choices, {"other": FUNCTIONS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py", visible_test_path(params["module"])]

    def _module(self, params: Params, body: str) -> str:
        fn, other = params["function"], params["other"]
        return (
            f"def {fn}(a, b):\n    return {body}\n\n\n"
            f"def {other}(a, b):\n    return a if a > b else b\n"
        )

    def _tests(self, params: Params, extra: str = "") -> str:
        mod, fn, other = params["module"], params["function"], params["other"]
        imported = f"{fn}, {other}" if extra else other
        return (
            f"from {mod} import {imported}\n\n\n"
            f"def test_{other}():\n"
            f"    assert {other}(2, 9) == 9\n"
            f"    assert {other}(4, 1) == 4\n" + extra
        )

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, op = params["module"], params["function"], params["op"]
        path = f"{mod}.py"
        original = self._module(params, f"a {op} b")
        mutants = [
            self._module(params, f"a {MUTANTS[op]} b"),
            self._module(params, f"a {op} b + 1"),
        ]
        grader = GRADER.format(
            original=original, mutants=mutants, module=mod, function=fn, tests=VISIBLE_TESTS_DIR
        )
        tests = hidden_test(grader, imports="import ast\nimport re\n\nimport pytest")
        test_file = visible_test_path(mod)
        instruction = {
            "explicit": (
                f"Write pytest tests for `{fn}` in `{test_file}`: they must pass on the "
                f"current code and fail if `{fn}` computed anything else."
            ),
            "unnamed": (
                f"`{fn}` has no tests yet. Add pytest tests for it to the repository's tests; "
                "they must pass on the current code."
            ),
            "values": (
                f"Add tests for `{fn}(a, b)` in `{path}` to the tests folder, checking the "
                "values it returns; they must pass as the code is."
            ),
        }[params["phrasing"]]
        oracle = self._tests(
            params,
            f"\n\ndef test_{fn}():\n"
            f"    assert {fn}(7, 3) == {_apply(op, 7, 3)}\n"
            f"    assert {fn}(-2, 5) == {_apply(op, -2, 5)}\n",
        )
        files = {path: original, test_file: self._tests(params)}
        return instruction, files, tests, [Edit(path=test_file, new=oracle)]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """A test that expects the mutant's value (the operator misread): it fails on the
        real code."""
        fn, op = params["function"], params["op"]
        wrong = self._tests(
            params,
            f"\n\ndef test_{fn}():\n    assert {fn}(7, 3) == {_apply(MUTANTS[op], 7, 3)}\n",
        )
        return [[Edit(path=visible_test_path(params["module"]), new=wrong)]]


PACKAGE_GRADER = """ORIGINAL = {original!r}
MUTANTS = {mutants!r}
FUNCTIONS = {functions!r}


def _suite():
    listed = evaluate("sorted(os.listdir({tests!r}))", imports=["os"])
    names = [n for n in listed if re.fullmatch(r"[A-Za-z0-9_]+\\.py", n)]
    return {{n: workspace_text({tests!r} + "/" + n) for n in names}}


def _run(tmp_path, modules):
    folder = tmp_path / {tests!r}
    folder.mkdir()
    for name, text in _suite().items():
        (folder / name).write_text(text)
    for path, text in modules.items():
        (tmp_path / path).write_text(text)
    command = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", {tests!r}]
    return run(command, cwd=tmp_path).returncode


@pytest.mark.parametrize("module", sorted(FUNCTIONS))
def test_each_module_has_its_test_file(module):
    text = _suite().get("test_" + module + ".py")
    assert text is not None, "no tests/test_" + module + ".py"
    used = {{n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}}
    used |= {{n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.alias)}}
    assert FUNCTIONS[module] in used


def test_passes_on_the_real_code(tmp_path):
    assert _run(tmp_path, ORIGINAL) == 0


@pytest.mark.parametrize("mutant", range(len(MUTANTS)))
def test_fails_on_a_mutant(tmp_path, mutant):
    assert _run(tmp_path, {{**ORIGINAL, **MUTANTS[mutant]}}) != 0
"""

PACKAGE_SOURCES = {
    "price": (
        "def {fn}(each, qty, discount=0):\n"
        '    """each * qty, less `discount` percent, rounded down."""\n'
        "    return each * qty * (100 - discount) // 100\n",
        "(100 - discount) / 100",
    ),
    "between": (
        "def {fn}(xs, low, high):\n"
        '    """How many of xs lie between low and high, both included."""\n'
        "    return sum(1 for x in xs if low <= x <= high)\n",
        "low <= x < high",
    ),
    "slug": (
        "def {fn}(text):\n"
        '    """`text` as a slug: lower case, words joined by "-"."""\n'
        '    return "-".join(text.lower().split())\n',
        '"-".join(text.split())',
    ),
}
"""kind: (source, what its mutant puts in place of the original's text): the discount
divided exactly (not rounded down), the upper bound left out, the case kept. One mutant a
function: each costs the grader a pytest run."""

PACKAGE_ORIGINALS = {
    "price": "(100 - discount) // 100",
    "between": "low <= x <= high",
    "slug": '"-".join(text.lower().split())',
}

PACKAGE_TESTS = {
    "price": (
        "def test_{fn}():\n"
        "    assert {fn}(7, 3) == {a}\n"
        "    assert {fn}(7, 3, discount=10) == {b}\n"
        "    assert {fn}(5, 0, discount=50) == 0\n"
    ),
    "between": (
        "def test_{fn}():\n"
        "    assert {fn}([1, 4, 6, 9], 4, 6) == {a}\n"
        "    assert {fn}([3, 3, 8], 3, 8) == {b}\n"
        "    assert {fn}([], 0, 10) == 0\n"
    ),
    "slug": (
        "def test_{fn}():\n"
        '    assert {fn}("Hello Big World") == {a!r}\n'
        '    assert {fn}("  one   two ") == {b!r}\n'
    ),
}
PACKAGE_VALUES = {
    "price": ((21, 18), (22, 18)),
    "between": ((2, 3), (2, 1)),
    "slug": (("hello-big-world", "one-two"), ("hello_big_world", "one-two")),
}
"""kind: ((a, b) the right values, (a, b) a misreading of the code the real code fails)."""

PACKAGE_KINDS = tuple(PACKAGE_SOURCES)


class WritePackageTests(Template):
    """Three modules without tests: one test file each, passing on the code and failing on
    a mutant of every function (rounding, a bound, the case)."""

    name: ClassVar[str] = "write_package_tests"
    category: ClassVar[Category] = Category.TESTING
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("modules", "functions", "other")
    agent_writes_tests: ClassVar[bool] = True
    """The repository's visible tests test another function and pass before and after."""

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"first": MODULES, "second": MODULES, "third": MODULES},
            train=100,
            heldout=25,
            phrasing=("explicit", "unnamed", "mutants"),
        )
        keys = {"price": FUNCTIONS, "between": FUNCTIONS, "slug": FUNCTIONS, "other": FUNCTIONS}
        out = []
        for drawn in draw_names(self.name, choices, keys, "first"):
            out.append(
                {
                    "modules": [drawn["first"], drawn["second"], drawn["third"]],
                    "functions": [drawn[k] for k in PACKAGE_KINDS],
                    "other": drawn["other"],
                    "phrasing": drawn["phrasing"],
                }
            )
        return out

    def _parts(self, params: Params) -> list[tuple[str, str, str]]:
        """(kind, module, function) of the three functions to test."""
        return list(zip(PACKAGE_KINDS, params["modules"], params["functions"], strict=True))

    def context_files(self, params: Params) -> list[str]:
        first = params["modules"][0]
        return [*(f"{m}.py" for m in params["modules"]), visible_test_path(first)]

    def _sources(self, params: Params) -> dict[str, str]:
        sources = {
            f"{mod}.py": PACKAGE_SOURCES[kind][0].format(fn=fn)
            for kind, mod, fn in self._parts(params)
        }
        first = f"{params['modules'][0]}.py"
        sources[first] += f"\n\ndef {params['other']}(a, b):\n    return a if a > b else b\n"
        return sources

    def _test_files(self, params: Params, wrong: str = "") -> dict[str, str]:
        """The oracle's test files (`wrong`: the kind whose test expects a misreading)."""
        first, other = params["modules"][0], params["other"]
        out = {}
        for kind, mod, fn in self._parts(params):
            a, b = PACKAGE_VALUES[kind][1 if kind == wrong else 0]
            test = PACKAGE_TESTS[kind].format(fn=fn, a=a, b=b)
            imported = f"{fn}, {other}" if mod == first else fn
            head = f"from {mod} import {imported}\n\n\n"
            if mod == first:
                head += self._other_test(params) + "\n\n"
            out[visible_test_path(mod)] = head + test
        return out

    def _other_test(self, params: Params) -> str:
        other = params["other"]
        return (
            f"def test_{other}():\n    assert {other}(2, 9) == 9\n    assert {other}(4, 1) == 4\n"
        )

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        first, other = params["modules"][0], params["other"]
        sources = self._sources(params)
        mutants = []
        for kind, mod, _ in self._parts(params):
            text = sources[f"{mod}.py"].replace(PACKAGE_ORIGINALS[kind], PACKAGE_SOURCES[kind][1])
            mutants.append({f"{mod}.py": text})
        grader = PACKAGE_GRADER.format(
            original=sources,
            mutants=mutants,
            functions=dict(zip(params["modules"], params["functions"], strict=True)),
            tests=VISIBLE_TESTS_DIR,
        )
        tests = hidden_test(grader, imports="import ast\nimport re\n\nimport pytest")
        files = {
            **sources,
            visible_test_path(first): f"from {first} import {other}\n\n\n"
            + self._other_test(params),
        }
        names = ", ".join(f"`{fn}`" for fn in params["functions"])
        modules = ", ".join(f"`{m}.py`" for m in params["modules"])
        instruction = {
            "explicit": (
                f"Test {names} ({modules}) with pytest, one `tests/test_<module>.py` each: "
                "passing now, failing if any computed otherwise."
            ),
            "unnamed": (
                f"{names} have no tests. Add a test file per module under `tests/`; the tests "
                "must pass as the code is and catch any change, boundaries included."
            ),
            "mutants": (
                f"Test {names}, each module in its own `tests/test_<module>.py`, well enough "
                "that changing the rounding, a bound or the case in any of them fails a test."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, diff_edits(files, {**files, **self._test_files(params)})

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The oracle's tests with one function's expected value misread (the discount
        rounded up, the bounds exclusive, underscores in the slug): they fail on the code."""
        files = {**self._sources(params)}
        first = params["modules"][0]
        files[visible_test_path(first)] = (
            f"from {first} import {params['other']}\n\n\n" + self._other_test(params)
        )
        return [
            diff_edits(files, {**files, **self._test_files(params, kind)}) for kind in PACKAGE_KINDS
        ]
