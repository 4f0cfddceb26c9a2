"""Testing: write tests that pass on the real code and catch a mutant."""

from __future__ import annotations

from typing import ClassVar

from composer_rl.tasks.model import GRADING_DIR, Category, Edit
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.debugging import _apply
from composer_rl.tasks.templates.vocab import FUNCTIONS, MODULES

MUTANTS = {"+": "-", "-": "+", "*": "+"}
"""The operator the grader swaps in to check that the agent's tests catch a change."""

GRADER = """import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORIGINAL = {original!r}
MUTANT = {mutant!r}


def _run_tests(tmp_path, source):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "{module}.py").write_text(source)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    # Not the grader's options (its report, its rootdir and path): a run of its own.
    env = {{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}}
    return subprocess.run(command, cwd=work, env=env, capture_output=True, timeout=60).returncode


def test_file_exists():
    assert (ROOT / "tests" / "test_{module}.py").is_file()


def test_passes_on_the_real_code(tmp_path):
    assert _run_tests(tmp_path, ORIGINAL) == 0


def test_fails_on_a_mutant(tmp_path):
    assert _run_tests(tmp_path, MUTANT) != 0
"""


class WriteTests(Template):
    """The hidden grader runs the agent's tests against the real code and a mutant."""

    name: ClassVar[str] = "write_tests"
    category: ClassVar[Category] = Category.TESTING
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=MODULES, function=FUNCTIONS, op=list(MUTANTS))

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, fn = params["module"], params["function"]
        op, mutant_op = params["op"], MUTANTS[params["op"]]
        path = f"{mod}.py"
        source = f"def {fn}(a, b):\n    return a {op} b\n"
        mutant = f"def {fn}(a, b):\n    return a {mutant_op} b\n"
        grader = GRADER.format(original=source, mutant=mutant, module=mod)
        tests = {f"{GRADING_DIR}/test_task.py": grader}
        instruction = f"Write pytest tests for `{fn}` in `tests/test_{mod}.py`."
        oracle = (
            f"from {mod} import {fn}\n\n\ndef test_{fn}():\n"
            f"    assert {fn}(7, 3) == {_apply(op, 7, 3)}\n"
        )
        return instruction, {path: source}, tests, [Edit(path=f"tests/test_{mod}.py", new=oracle)]
