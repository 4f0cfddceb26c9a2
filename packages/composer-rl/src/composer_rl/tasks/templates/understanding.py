"""Understanding a codebase: answer a question about it in `answer.txt`, or act on what the
call graph says (`remove_dead_code`: delete what the entry point cannot reach).

The visible tests check what can be checked without giving the answer away: the answer
file exists, holds one line, and has the answer's form (a number, a file of the
repository); the dead-code check counts the unreachable functions without naming them.
The hidden tests read the answer as data (`workspace_text`) and compare it, or parse each
module's functions (`ast`, never importing them) and run the command line.
Every name in a repository, decoys included, is of the task's split.
"""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import VISIBLE_TESTS_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, named_grid
from composer_rl.tasks.templates.common import (
    ANSWER_FILE,
    HIDDEN_TEST_PATH,
    answer_tests,
    cached_space,
    diff_edits,
    draw_names,
    hidden_test,
)
from composer_rl.tasks.templates.vocab import CONSTANTS, FUNCTIONS, MODULES, name_split, names

NUMBER_CHECK = f'''def test_answer_is_a_number():
    text = answer().strip()
    assert text.lstrip("-").isdigit(), (
        "{ANSWER_FILE} should hold just the number, such as 7: not a sentence or an assignment"
    )
'''

FILE_CHECK = f'''def test_answer_names_a_python_file_of_the_repository():
    name = answer().strip()
    assert name.endswith(".py") and Path(name).is_file(), (
        "{ANSWER_FILE} should hold the name of a Python file of this repository, such as name.py"
    )
'''


def _same_split(pool: tuple[str, ...], name: str) -> list[str]:
    """The other names of `pool` in `name`'s split, starting after `name` (so decoys
    differ between tasks and never come from the other split)."""
    ours = list(names(pool, name_split(name)))
    at = ours.index(name) if name in ours else 0
    return [n for n in ours[at + 1 :] + ours[:at] if n != name]


class ReadConstant(Template):
    """Look up a constant's value in a module full of constants."""

    name: ClassVar[str] = "read_constant"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 1
    name_params: ClassVar[tuple[str, ...]] = ("module", "constant")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"module": MODULES, "constant": CONSTANTS},
            train=276,
            heldout=60,
            value=[3, 8, 15, 42, 64, 100, 256],
            phrasing=("explicit", "unnamed", "lookup"),
        )

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, const, value = params["module"], params["constant"], params["value"]
        path = f"{mod}.py"
        others = _same_split(CONSTANTS, const)[:3]
        lines = [f"{c} = {value + 7 * (i + 1)}" for i, c in enumerate(others)]
        lines.insert(len(mod) % (len(lines) + 1), f"{const} = {value}")
        files = {path: "\n".join(lines) + "\n", **answer_tests(NUMBER_CHECK)}
        tests = hidden_test(
            "def test_answer():\n"
            f'    assert workspace_text("{ANSWER_FILE}").strip() == "{value}"\n\n\n'
            "def test_the_constant_is_unchanged():\n"
            f'    assert evaluate("{mod}.{const}", imports=["{mod}"]) == {value}\n'
        )
        instruction = {
            "explicit": (
                f"What is the value of `{const}` in `{path}`? Write just the value to "
                f"`{ANSWER_FILE}`."
            ),
            "unnamed": (
                f"A constant `{const}` is defined somewhere in this repository. Write its "
                f"value, and nothing else, to `{ANSWER_FILE}`."
            ),
            "lookup": (
                f"Look up `{const}` in `{path}` and write the number alone to a new file "
                f"`{ANSWER_FILE}`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, [Edit(path=ANSWER_FILE, new=f"{value}\n")]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The whole assignment, or a sentence, instead of the value alone."""
        const, value = params["constant"], params["value"]
        return [
            [Edit(path=ANSWER_FILE, new=f"{const} = {value}\n")],
            [Edit(path=ANSWER_FILE, new=f"The value of {const} is {value}.\n")],
        ]


class FindDefinition(Template):
    """Which of several modules defines a given function."""

    name: ClassVar[str] = "find_definition"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 2
    name_params: ClassVar[tuple[str, ...]] = ("function", "module")

    @cached_space
    def parameter_space(self) -> list[Params]:
        return named_grid(
            self.name,
            {"function": FUNCTIONS, "module": MODULES},
            train=208,
            heldout=48,
            decoys=[0, 1, 2, 3],
            phrasing=("explicit", "search", "grep"),
        )

    def _modules(self, params: Params) -> list[str]:
        """The defining module and two decoys of its split, in the order a reader lists
        them."""
        start = params["decoys"]
        decoys = _same_split(MODULES, params["module"])[start : start + 2]
        return sorted([params["module"], *decoys])

    def context_files(self, params: Params) -> list[str]:
        modules = self._modules(params)
        return [f"{m}.py" for m in modules[: modules.index(params["module"]) + 1]]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        fn, mod = params["function"], params["module"]
        fillers = iter(_same_split(FUNCTIONS, fn))
        files = {}
        for m in self._modules(params):
            name = fn if m == mod else next(fillers)
            files[f"{m}.py"] = f"def {name}(x):\n    return x + 1\n"
        files.update(answer_tests(FILE_CHECK))
        tests = hidden_test(
            "def test_answer():\n"
            f'    assert workspace_text("{ANSWER_FILE}").strip() == "{mod}.py"\n'
        )
        instruction = {
            "explicit": (
                f"Which file defines the function `{fn}`? Write just the file name to "
                f"`{ANSWER_FILE}`."
            ),
            "search": (
                f"Find the module where `{fn}` is defined and write its file name (such as "
                f"`name.py`), nothing else, to `{ANSWER_FILE}`."
            ),
            "grep": (
                f"Exactly one file of this repository contains `def {fn}(`. Write that "
                f"file's name alone to `{ANSWER_FILE}`."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, [Edit(path=ANSWER_FILE, new=f"{mod}.py\n")]

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """The module's name without its extension, or the function's name."""
        return [
            [Edit(path=ANSWER_FILE, new=f"{params['module']}\n")],
            [Edit(path=ANSWER_FILE, new=f"{params['function']}\n")],
        ]


DEAD_CLI = '''"""python cli.py COMMAND NUMBER...: run one of the commands on the numbers."""

import sys

from {module} import {imported}

COMMANDS = {table}


def main(argv=None):
    name, *numbers = sys.argv[1:] if argv is None else argv
    print(COMMANDS[name]([int(n) for n in numbers]))
    return 0
{usage}

if __name__ == "__main__":
    raise SystemExit(main())
'''
DEAD_USAGE = '''

def usage():
    """The command line's synopsis."""
    return "python cli.py " + "|".join(COMMANDS) + " NUMBER..."
'''
DEAD_FIRST = '''from {other} import {imported}


def {doubled}(xs):
    """Command: the numbers doubled, summed."""
    return sum({helper}(x) for x in xs)
{largest}{listed}'''
DEAD_LARGEST = '''

def {largest}(xs):
    """Command: the largest number."""
    return max(xs)
'''
DEAD_LISTED = '''

def {listed}(xs):
    """The numbers doubled, then the numbers in order."""
    return [{helper}(x) for x in xs] + {ordered}(xs)
'''
DEAD_SECOND = '''def {helper}(x):
    """x doubled."""
    return x * 2
{ordered}{cycle}'''
DEAD_ORDERED = '''

def {ordered}(xs):
    """The numbers in order."""
    return sorted(xs)
'''
DEAD_CYCLE = '''

def {down}(n):
    """n halved and stepped down until it is below 2."""
    return n if n < 2 else {step}(n // 2)


def {step}(n):
    return {down}(n - 1)
'''

DEAD_VISIBLE_CLI = '''"""The commands, run as the command line runs them."""

from cli import main


def test_{doubled}(capsys):
    main(["{doubled}", "4", "1", "3"])
    assert capsys.readouterr().out == "16\\n", "{doubled} 4 1 3 should print (4 + 1 + 3) * 2"


def test_{largest}(capsys):
    main(["{largest}", "4", "9", "3"])
    assert capsys.readouterr().out == "9\\n", "{largest} 4 9 3 should print 9"
'''
DEAD_VISIBLE_CHECK = '''"""The project's dead-code check: every function is reachable from the command line."""

import ast
from pathlib import Path


def reachable_and_defined():
    """Functions reached from module-level code (the command table, `main`) and every
    top-level function of the package's modules."""
    uses, roots = {}, set()
    for path in sorted(Path(".").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if isinstance(node, ast.FunctionDef):
                uses[node.name] = names
            elif not isinstance(node, ast.Import | ast.ImportFrom):
                roots |= names
    seen, todo = set(), [r for r in roots if r in uses]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [n for n in uses[name] if n in uses]
    return seen, set(uses)


def test_no_dead_functions():
    reached, defined = reachable_and_defined()
    dead = defined - reached
    assert not dead, (
        f"{len(dead)} functions cannot be reached from the command line (main and its "
        "command table): find and remove them"
    )
'''

DEAD_TESTS = """import ast

import pytest

from workspace_probe import call, run, workspace_text

LIVE = {live!r}


@pytest.mark.parametrize("path", sorted(LIVE))
def test_exactly_the_dead_functions_are_gone(path):
    tree = ast.parse(workspace_text(path))
    defined = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
    assert defined == LIVE[path]


def test_the_commands_still_work():
    for argv, printed in {runs!r}:
        proc = run(["python", "cli.py", *argv])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == printed
    assert call({other!r}, {helper!r}, 21) == 42
"""


class RemoveDeadCode(Template):
    """Delete the functions a command line can no longer reach, across three modules:
    unreferenced ones, ones only dead code calls, and a pair that only call each other;
    keep one reached only through the command table."""

    name: ClassVar[str] = "remove_dead_code"
    category: ClassVar[Category] = Category.UNDERSTANDING
    difficulty: ClassVar[int] = 3
    name_params: ClassVar[tuple[str, ...]] = (
        "module",
        "other",
        "doubled",
        "largest",
        "helper",
        "listed",
        "ordered",
        "down",
        "step",
    )

    @cached_space
    def parameter_space(self) -> list[Params]:
        choices = named_grid(
            self.name,
            {"module": MODULES, "other": MODULES},
            train=100,
            heldout=25,
            phrasing=("explicit", "unnamed", "listed"),
        )
        keys = ("doubled", "largest", "helper", "listed", "ordered", "down", "step")
        return draw_names(self.name, choices, dict.fromkeys(keys, FUNCTIONS), "module")

    def context_files(self, params: Params) -> list[str]:
        return ["cli.py", f"{params['module']}.py", f"{params['other']}.py"]

    def _files(
        self, params: Params, *, dead: bool, largest: bool = True, cycle: bool = True
    ) -> dict[str, str]:
        """The three modules, with the dead code (`dead`) or without; `largest` False also
        drops the command reached only through the table, `cycle` False keeps the pair that
        only call each other."""
        p = params
        commands = [p["doubled"], *([p["largest"]] if largest else [])]
        first_imports = [p["helper"], *([p["ordered"]] if dead else [])]
        return {
            "cli.py": DEAD_CLI.format(
                module=p["module"],
                imported=", ".join(commands),
                table="{" + ", ".join(f'"{c}": {c}' for c in commands) + "}",
                usage=DEAD_USAGE if dead else "",
            ),
            f"{p['module']}.py": DEAD_FIRST.format(
                other=p["other"],
                imported=", ".join(first_imports),
                doubled=p["doubled"],
                helper=p["helper"],
                largest=DEAD_LARGEST.format(largest=p["largest"]) if largest else "",
                listed=DEAD_LISTED.format(
                    listed=p["listed"], helper=p["helper"], ordered=p["ordered"]
                )
                if dead
                else "",
            ),
            f"{p['other']}.py": DEAD_SECOND.format(
                helper=p["helper"],
                ordered=DEAD_ORDERED.format(ordered=p["ordered"]) if dead else "",
                cycle=DEAD_CYCLE.format(down=p["down"], step=p["step"])
                if dead or not cycle
                else "",
            ),
        }

    def _edits(self, params: Params, **after: bool) -> list[Edit]:
        return diff_edits(self._files(params, dead=True), self._files(params, dead=False, **after))

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, other = params["module"], params["other"]
        doubled, largest = params["doubled"], params["largest"]
        files = self._files(params, dead=True)
        files[f"{VISIBLE_TESTS_DIR}/test_cli.py"] = DEAD_VISIBLE_CLI.format(
            doubled=doubled, largest=largest
        )
        files[f"{VISIBLE_TESTS_DIR}/test_dead_code.py"] = DEAD_VISIBLE_CHECK
        live = {
            "cli.py": ["main"],
            f"{mod}.py": sorted([doubled, largest]),
            f"{other}.py": [params["helper"]],
        }
        runs = [
            ([doubled, "5", "7"], "24\n"),
            ([largest, "2", "11", "6"], "11\n"),
            ([doubled], "0\n"),
        ]
        tests = {
            HIDDEN_TEST_PATH: DEAD_TESTS.format(
                live=live, runs=runs, other=other, helper=params["helper"]
            )
        }
        instruction = {
            "explicit": (
                f"Delete every function of `cli.py`, `{mod}.py` and `{other}.py` that `main` "
                "can no longer reach (directly, via the command table or via other functions)."
            ),
            "unnamed": (
                "Clean out the dead code: delete each function the command line can no longer "
                "reach, directly or through other functions, and keep all it still uses."
            ),
            "listed": (
                f"Some functions in `{mod}.py` and `{other}.py` and one in `cli.py` are dead. "
                "Remove every one the command line cannot reach; keep what it uses."
            ),
        }[params["phrasing"]]
        return instruction, files, tests, self._edits(params)

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Only the functions nothing names removed; all but the pair that call each other;
        also the command only the table reaches."""
        unnamed_only = [
            e for e in self._edits(params) if e.path == "cli.py" or params["listed"] in str(e.old)
        ]
        return [
            unnamed_only,
            self._edits(params, cycle=False),
            self._edits(params, largest=False),
        ]
