"""Repositories a developer would recognise (issue #29), graded without importing them
(issue #30).

Every built-in repository carries its own tests under `tests/`, run as the agent runs them
(`VISIBLE_TEST_COMMAND` from the repository root): they fail on the untouched repository
with something to act on, pass after the oracle's edits (which leave them alone), and
fail after each of the template's declared wrong first edits. A template where the agent
writes the tests (`agent_writes_tests`) has only other, passing tests there.

The hidden tests reach the repository only through `workspace_probe`: no import of a
repository module, no `sys.path`, `subprocess`, `importlib`, `open` or `read_text`.
"""

from __future__ import annotations

import ast
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, Template
from composer_rl.tasks.grading import write_tree
from composer_rl.tasks.model import GRADING_DIR, VISIBLE_TEST_COMMAND, VISIBLE_TESTS_DIR


def run_visible(files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The visible tests of a repository state, run as the agent runs them."""
    argv = shlex.split(VISIBLE_TEST_COMMAND)
    argv[0] = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    with tempfile.TemporaryDirectory(prefix="composer-visible-") as tmp:
        write_tree(Path(tmp), files)
        return subprocess.run(
            argv,
            cwd=tmp,
            env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=120,
        )


FAILURE_LINE = re.compile(r"^\S+\.py:\d+: (.*)$", re.MULTILINE)
"""A failure as `--tb=line` reports it: `path:line: what went wrong`."""

MESSAGE = re.compile(r"[A-Za-z_.]*(Error|Exception)\b: \S")
"""An error with a message (`AssertionError: combine(2, 5) should be 7`), not a bare
`assert x == y`."""


def _first(template: Template, split: Split) -> Task:
    return next(iter(template.tasks(split)))


def _visible_files(task: Task) -> list[str]:
    return [p for p in task.files if p.startswith(f"{VISIBLE_TESTS_DIR}/") and p.endswith(".py")]


def check_visible(template: Template, task: Task) -> None:
    assert _visible_files(task), f"{task.id}: no tests under {VISIBLE_TESTS_DIR}/"
    writes_tests = getattr(template, "agent_writes_tests", False)
    if not writes_tests:
        touched = {e.path for e in task.solution} & set(_visible_files(task))
        assert not touched, f"{task.id}: the oracle edits the visible tests {touched}"
    untouched = run_visible(task.files)
    out = untouched.stdout + untouched.stderr
    if writes_tests:
        assert untouched.returncode == 0, f"{task.id}: its other tests fail\n{out}"
    else:
        # 1: tests ran and some failed (not a collection error, not "no tests").
        assert untouched.returncode == 1, f"{task.id}: untouched, rc {untouched.returncode}\n{out}"
        failures = FAILURE_LINE.findall(out)
        assert failures, out
        bare = [f for f in failures if not MESSAGE.match(f)]
        assert not bare, f"{task.id}: failures without a message to act on: {bare}"
    solved = run_visible(task.solved_files())
    assert solved.returncode == 0, f"{task.id}: fail after the oracle\n{solved.stdout}"


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_visible_tests_fail_untouched_and_pass_solved(template: Template) -> None:
    for split in Split:
        check_visible(template, _first(template, split))


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_declared_wrong_edits_fail_the_visible_tests(template: Template) -> None:
    """A recovering demonstration opens with one of these and a failing run: an attempt
    the visible tests cannot tell from right would be "fixed" for no visible reason."""
    task = _first(template, Split.TRAIN)
    for edits in template.wrong_edits(dict(task.metadata["params"])):
        files = dict(task.files)
        for edit in edits:
            files = edit.apply(files)
        assert files != task.solved_files()
        result = run_visible(files)
        assert result.returncode != 0, f"{task.id}: {edits} passes the visible tests"


@pytest.mark.slow
@pytest.mark.parametrize("split", list(Split))
def test_visible_tests_on_a_sample_of_every_template(split: Split) -> None:
    rng = random.Random(3)
    for template in BUILTIN_TEMPLATES:
        tasks = list(template.tasks(split))
        for task in rng.sample(tasks, min(3, len(tasks))):
            check_visible(template, task)


# -- hidden tests reach the workspace through the probe only --------------------------------

PROBE = "workspace_probe"
PROBE_NAMES = {"call", "evaluate", "run", "workspace_text", "WorkspaceError", "ObjectValue"}

EXECUTES_CODE = {
    "builtins",
    "code",
    "codeop",
    "concurrent",
    "ctypes",
    "doctest",
    "imp",
    "importlib",
    "inspect",
    "multiprocessing",
    "os",
    "pdb",
    "pkgutil",
    "pty",
    "pydoc",
    "runpy",
    "site",
    "subprocess",
    "sys",
    "trace",
    "unittest",
    "zipimport",
}
"""Standard-library modules through which a hidden test could run or load workspace code
(or edit `sys.path`): the probe does that for it, in a child."""

ALLOWED_MODULES = (set(sys.stdlib_module_names) - EXECUTES_CODE) | {PROBE, "pytest", "_pytest"}

FORBIDDEN_CALLS = {"open", "exec", "eval", "compile", "__import__", "execfile"}
FORBIDDEN_METHODS = {"read_text", "read_bytes", "open", "system", "popen"}


def repository_modules(files: dict[str, str]) -> set[str]:
    """Top-level names a repository's files could be imported by."""
    out = set()
    for path in files:
        parts = PurePosixPath(path).parts
        if path.endswith(".py"):
            out.add(PurePosixPath(parts[0]).stem if len(parts) == 1 else parts[0])
    return out


def probe_violations(source: str, repository: set[str]) -> list[str]:
    """What in a hidden test's source reaches the workspace other than through the probe."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] if node.level == 0 else ["." * node.level]
            if node.module == PROBE:
                extra = {a.name for a in node.names} - PROBE_NAMES
                found += [f"imports {name} from the probe" for name in sorted(extra)]
        else:
            modules = []
        for module in modules:
            top = module.split(".")[0]
            if top in repository:
                found.append(f"imports the repository's {module}")
            elif top not in ALLOWED_MODULES:
                found.append(f"imports {module}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"calls {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS:
                found.append(f"calls .{func.attr}()")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            found.append("uses sys.path")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            found.append("uses __builtins__")
    return found


def test_probe_violations_catch_each_way_in() -> None:
    repository = {"mathops", "pkg"}
    assert not probe_violations(
        "import ast\nimport pytest\nfrom workspace_probe import call, run\n"
        "def test_x(tmp_path):\n    assert call('mathops', 'f', 1) == 2\n",
        repository,
    )
    bad = {
        "import mathops": "imports the repository's mathops",
        "from pkg.sub import f": "imports the repository's pkg.sub",
        "import subprocess": "imports subprocess",
        "import importlib.util": "imports importlib.util",
        "import sys\nsys.path.insert(0, '.')": "uses sys.path",
        "x = open('mathops.py').read()": "calls open()",
        "from pathlib import Path\nPath('a.py').read_text()": "calls .read_text()",
        "__import__('mathops')": "calls __import__()",
        "from workspace_probe import WORKSPACE": "imports WORKSPACE from the probe",
        "import numpy": "imports numpy",
        "from . import helper": "imports .",
    }
    for source, reason in bad.items():
        assert reason in probe_violations(source, repository), source


@pytest.mark.parametrize("template", BUILTIN_TEMPLATES, ids=lambda t: t.name)
def test_hidden_tests_reach_the_workspace_only_through_the_probe(template: Template) -> None:
    rng = random.Random(template.name)
    for split in Split:
        space = [p for p in template.parameter_space() if template.split(p) == split]
        for params in rng.sample(space, min(10, len(space))):
            task = template.build(params)
            repository = repository_modules(task.files)
            for path, source in task.tests.items():
                assert path.startswith(f"{GRADING_DIR}/")
                if path.endswith(".py"):
                    violations = probe_violations(source, repository)
                    assert not violations, f"{task.id} {path}: {violations}"
