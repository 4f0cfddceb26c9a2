"""Documentation: add a docstring that names what it must name, or bring the examples of a
README, a guide and the docstrings up to date with a release (`fix_doc_examples`).

The hidden tests read the docstring from the workspace's text with `ast` (the grader
never imports the module) and the behaviour through `workspace_probe`.
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
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES, PARAMS


class AddDocstring(Template):
    """Give a function a docstring that mentions its parameter."""

    name: ClassVar[str] = "add_docstring"
    category: ClassVar[Category] = Category.DOCUMENTATION
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "function", "param")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "function": FUNCTIONS},
            train=608,
            heldout=160,
            factor=[2, 3, 4],
            phrasing=("explicit", "unnamed", "missing"),
        )
        return draw_names(self.name, choices, {"param": PARAMS}, "module")

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn, p, k = params["module"], params["function"], params["param"], params["factor"]
        path = f"{mod}.py"
        header = f"def {fn}({p}):\n"
        source = f"{header}    return {p} * {k}\n"
        visible = (
            f"from {mod} import {fn}\n\n\n"
            f"def test_{fn}_has_a_docstring():\n"
            f'    assert {fn}.__doc__, "{fn} needs a docstring"\n\n\n'
            f"def test_the_docstring_mentions_{p}():\n"
            f'    assert "{p}" in ({fn}.__doc__ or ""), '
            f'"the docstring of {fn} should mention its parameter {p}"\n'
        )
        tests = hidden_test(
            "def _docstring():\n"
            f'    tree = ast.parse(workspace_text("{path}"))\n'
            "    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)\n"
            f'            and n.name == "{fn}"]\n'
            "    assert len(defs) == 1\n"
            '    return ast.get_docstring(defs[0]) or ""\n\n\n'
            f"def test_the_docstring_explains_{p}():\n"
            "    doc = _docstring()\n"
            f'    assert re.search(r"\\b{p}\\b", doc)\n'
            "    assert len(doc.split()) >= 3\n\n\n"
            f"def test_{fn}_behaves_as_before():\n"
            f'    assert call("{mod}", "{fn}", 5) == {5 * k}\n'
            f'    assert call("{mod}", "{fn}", 0) == 0\n'
            f'    assert call("{mod}", "{fn}", -2) == {-2 * k}\n',
            imports="import ast\nimport re",
        )
        instruction = {
            "explicit": (
                f"Add a docstring to `{fn}` in `{path}` that explains its parameter `{p}`."
            ),
            "unnamed": (
                f"Document `{fn}`: give it a docstring that says what its parameter `{p}` is."
            ),
            "missing": (
                f"`{fn}` in `{path}` has no docstring. Write one that mentions the "
                f"parameter `{p}` by name."
            ),
        }[params["phrasing"]]
        edit = Edit(
            path=path, old=header, new=f'{header}    """Return `{p}` multiplied by {k}."""\n'
        )
        return instruction, {path: source, visible_test_path(mod): visible}, tests, [edit]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """A comment instead of a docstring; a docstring that leaves the parameter out."""
        mod, fn, p, k = params["module"], params["function"], params["param"], params["factor"]
        header = f"def {fn}({p}):\n"
        return [
            [Edit(path=f"{mod}.py", old=header, new=f"{header}    # Return `{p}` times {k}.\n")],
            [Edit(path=f"{mod}.py", old=header, new=f'{header}    """Multiply by {k}."""\n')],
        ]


DOC_MODULE = '''"""Word statistics for short texts."""


def {new}(text):
    """(word, count) pairs, most frequent first, ties in alphabetical order.

    >>> {tally_doc_call}
    {tally_doc_out}
    """
    counts = {{}}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))


def {longest}(text, *, ties="first"):
    """The longest word; `ties` ("first" or "last") picks among words as long.

    >>> {longest_doc_call}
    'cat'
    """
    words = text.split()
    if ties == "last":
        words = words[::-1]
    return max(words, key=len)


def {joined}(words, *, sep=", "):
    """The words joined by `sep`, the last two by " and "."""
    if len(words) < 2:
        return "".join(words)
    return sep.join(words[:-1]) + " and " + words[-1]
'''
DOC_README = """# {mod}

Word statistics for short texts (version 2.0; see CHANGELOG.md).

    >>> from {mod} import {imports}
    >>> {tally_call}
    {tally_out}
    >>> {longest_call}
    'cat'
    >>> {joined_call}
    'ant; bee and cat'

More in docs/guide.md.
"""
DOC_GUIDE = """# Guide

Counting words:

    >>> from {mod} import {imports}
    >>> {tally_call}
    {tally_out}

The last of the longest words:

    >>> {longest_call}
    'seven'

Lists for people:

    >>> {joined_call}
    'tea / milk and honey'
"""
DOC_CHANGELOG = """# Changelog

## 2.0.0

- `{old}` is now `{new}`, and returns (word, count) pairs, most frequent first (ties in
  alphabetical order), instead of a dict.
- `{longest}` takes `ties="first"` or `ties="last"` (keyword only) instead of `last=`.
- `{joined}`'s `sep` is keyword only.
"""

DOC_TEXTS = {
    "docstring": "to do or not to do",
    "readme": "to be or not to be",
    "guide": "a rose is a rose",
}


def _pairs(text: str) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))


def _seen_order(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts


DOC_VISIBLE = '''"""The documentation's examples run (doctest) and cover every function."""

import doctest
import re
from pathlib import Path

import pytest

import {mod}

DOCS = ["README.md", "docs/guide.md"]
FUNCTIONS = {functions!r}


class Collect(doctest.DocTestRunner):
    """Runs examples quietly, keeping the source of each one that fails."""

    def __init__(self):
        super().__init__(verbose=False)
        self.failed = []

    def report_failure(self, out, test, example, got):
        self.failed.append(example.source.strip())

    def report_unexpected_exception(self, out, test, example, exc_info):
        self.failed.append(example.source.strip())


def check(where, tests):
    runner = Collect()
    for test in tests:
        runner.run(test, out=lambda text: None)
    if runner.failed:
        raise AssertionError(
            f"{{len(runner.failed)}} of {{runner.tries}} examples in {{where}} fail, such as "
            f"{{runner.failed[0]}} (python -m doctest -v {{where}})"
        )


@pytest.mark.parametrize("path", DOCS)
def test_the_examples_pass(path):
    check(path, [doctest.DocTestParser().get_doctest(Path(path).read_text(), {{}}, path, path, 0)])


def test_the_docstring_examples_pass():
    check("{mod}.py", doctest.DocTestFinder().find({mod}))


@pytest.mark.parametrize("path", DOCS)
def test_every_function_keeps_an_example(path):
    text = Path(path).read_text()
    for name in FUNCTIONS:
        if not re.search(rf">>> .*\\b{{name}}\\(", text):
            raise AssertionError(f"{{path}} has no example of {{name}}: fix examples, do not drop them")
'''

DOC_TESTS = """import ast
import re

import pytest

from workspace_probe import run, workspace_text

DOCS = ["README.md", "docs/guide.md", {mod!r} + ".py"]
FUNCTIONS = {functions!r}
ORIGINAL = {original!r}
EXAMPLES = {examples!r}


def _code(source):
    # The module's code with every docstring left out.
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def test_the_examples_pass():
    proc = run(["python", "-m", "doctest", *DOCS])
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.parametrize("path", DOCS)
def test_no_example_was_dropped(path):
    text = workspace_text(path)
    assert len(re.findall(r">>> ", text)) >= EXAMPLES[path]
    assert not re.search(r"\\b{old}\\b", text)
    if path.endswith(".md"):
        for name in FUNCTIONS:
            assert re.search(rf">>> .*\\b{{name}}\\(", text), name


def test_the_code_is_unchanged():
    assert _code(workspace_text({mod!r} + ".py")) == _code(ORIGINAL)
"""


class FixDocExamples(Template):
    """Since 2.0 the examples of the README, the guide and the docstrings fail; update them
    from the CHANGELOG without touching the code."""

    name: ClassVar[str] = "fix_doc_examples"
    category: ClassVar[Category] = Category.DOCUMENTATION
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = ("module", "old", "new", "longest", "joined")

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "old": FUNCTIONS},
            train=100,
            heldout=25,
            phrasing=("explicit", "unnamed", "changelog"),
        )
        pools = {"new": FUNCTIONS, "longest": FUNCTIONS, "joined": FUNCTIONS}
        return draw_names(self.name, choices, pools, "module")

    def context_files(self, params: Params) -> list[str]:
        return ["CHANGELOG.md", "README.md", "docs/guide.md", f"{params['module']}.py"]

    def _docs(
        self,
        params: Params,
        *,
        readme: bool = False,
        guide: bool = False,
        module: bool = False,
        by_count: bool = True,
    ) -> dict[str, str]:
        """README, guide and module, each with the examples of 1.x or (True) of 2.0;
        `by_count` False writes 2.0's pairs in the order the words come."""
        mod, old, new = params["module"], params["old"], params["new"]
        longest, joined = params["longest"], params["joined"]

        def tally(key: str, now: bool) -> dict[str, str]:
            text = DOC_TEXTS[key]
            if not now:
                out = repr(_seen_order(text))
            else:
                out = repr(_pairs(text) if by_count else list(_seen_order(text).items()))
            return {
                "tally": new if now else old,
                "call": f'{new if now else old}("{text}")',
                "out": out,
            }

        def last(now: bool) -> str:
            return 'ties="last"' if now else "last=True"

        def sep(now: bool) -> str:
            return "sep=" if now else ""

        first, second = tally("readme", readme), tally("guide", guide)
        doc = tally("docstring", module)
        return {
            "README.md": DOC_README.format(
                mod=mod,
                imports=", ".join([first["tally"], longest, joined]),
                tally_call=first["call"],
                tally_out=first["out"],
                longest_call=f'{longest}("ant bee cat", {last(readme)})',
                joined_call=f'{joined}(["ant", "bee", "cat"], {sep(readme)}"; ")',
            ),
            "docs/guide.md": DOC_GUIDE.format(
                mod=mod,
                imports=", ".join([second["tally"], longest, joined]),
                tally_call=second["call"],
                tally_out=second["out"],
                longest_call=f'{longest}("one three five seven", {last(guide)})',
                joined_call=f'{joined}(["tea", "milk", "honey"], {sep(guide)}" / ")',
            ),
            f"{mod}.py": DOC_MODULE.format(
                mod=mod,
                new=new,
                longest=longest,
                joined=joined,
                tally_doc_call=doc["call"],
                tally_doc_out=doc["out"],
                longest_doc_call=f'{longest}("ant bee cat", {last(module)})',
            ),
        }

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, old, new = params["module"], params["old"], params["new"]
        functions = [new, params["longest"], params["joined"]]
        files = self._docs(params)
        files["CHANGELOG.md"] = DOC_CHANGELOG.format(
            old=old, new=new, longest=params["longest"], joined=params["joined"]
        )
        files[f"{VISIBLE_TESTS_DIR}/test_docs.py"] = DOC_VISIBLE.format(
            mod=mod, functions=functions
        )
        docs = ("README.md", "docs/guide.md", f"{mod}.py")
        examples = {path: files[path].count(">>> ") for path in docs}
        tests = {
            HIDDEN_TEST_PATH: DOC_TESTS.format(
                mod=mod,
                old=old,
                functions=functions,
                original=files[f"{mod}.py"],
                examples=examples,
            )
        }
        instruction = {
            "explicit": (
                f"Since 2.0 (`CHANGELOG.md`) the examples in `README.md`, `docs/guide.md` and "
                f"`{mod}.py`'s docstrings fail. Update them; do not change the code."
            ),
            "unnamed": (
                f"The documentation's examples still show the 1.x API (`{old}` and others) "
                "and fail as doctests. Bring every example up to date; leave the code alone."
            ),
            "changelog": (
                "Every doc example must pass `python -m doctest` again after the 2.0 changes "
                "the changelog lists. Fix the examples, not the code."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, self._edits(params)

    def _edits(self, params: Params, **after: bool) -> list[Edit]:
        now = {"readme": True, "guide": True, "module": True, **after}
        return diff_edits(self._docs(params), self._docs(params, **now))

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The README and docstrings updated but not the guide; the Markdown docs but not
        the docstrings; the pairs written in the order the words come, not by count."""
        return [
            self._edits(params, guide=False),
            self._edits(params, module=False),
            self._edits(params, by_count=False),
        ]
