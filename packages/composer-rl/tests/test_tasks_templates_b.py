"""The code-review, optimisation, devops and migration templates: their hidden tests hold
against edits that look solved without being solved, and their visible tests tell a wrong
first attempt from the fix.

Each attack here is an edit a reward-seeking policy could make on a real built-in task: a
workspace `json.py` standing in for the standard library (issue 30), a store that stops
counting its queries, a CI whose tools check nothing, a caller that bypasses the new API, a
named tuple passed off as the dataclass. Each must be graded failed while the oracle passes.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from composer_rl.tasks import BUILTIN_TEMPLATES, Split, Task, grade_files
from composer_rl.tasks.grading import write_tree
from composer_rl.tasks.model import VISIBLE_TEST_COMMAND, VISIBLE_TESTS_DIR

TEMPLATES = {t.name: t for t in BUILTIN_TEMPLATES}
MINE = [
    "review_diff",
    "review_and_fix",
    "memoize_recursion",
    "batch_queries",
    "fix_config",
    "fix_ci",
    "move_callers",
    "tuples_to_dataclass",
]
HIDDEN_IMPORTS = {"workspace_probe", "re", "json", "pytest"}
"""All a hidden test of these templates may import: the probe and what pytest has loaded
already (a workspace module of the same name cannot shadow those in the grader)."""


def _task(name: str, split: Split = Split.TRAIN, **params: object) -> Task:
    """The first task of `name` in `split` whose parameters include `params`."""
    for task in TEMPLATES[name].tasks(split):
        if all(task.metadata["params"].get(k) == v for k, v in params.items()):
            return task
    raise LookupError(f"no {name} task with {params}")


def _passes(task: Task, files: dict[str, str]) -> bool:
    return grade_files(task, files).success


def _visible_pass(files: dict[str, str]) -> bool:
    """Whether the repository's own tests pass, run as the agent runs them."""
    argv = shlex.split(VISIBLE_TEST_COMMAND)
    argv[0] = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(Path(tmp), files)
        proc = subprocess.run(
            [*argv, "-p", "no:cacheprovider"], cwd=tmp, capture_output=True, timeout=300
        )
    return proc.returncode == 0


@pytest.mark.parametrize("name", MINE)
def test_hidden_tests_reach_the_workspace_only_through_the_probe(name: str) -> None:
    for split in (Split.TRAIN, Split.HELDOUT):
        task = next(iter(TEMPLATES[name].tasks(split)))
        assert any(p.startswith(f"{VISIBLE_TESTS_DIR}/") for p in task.files), task.id
        for path, text in task.tests.items():
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    found = {(node.module or "").split(".")[0]}
                else:
                    continue
                assert found <= HIDDEN_IMPORTS, (task.id, path, found)
            assert "sys.path" not in text and "open(" not in text, (task.id, path)


@pytest.mark.slow  # about three pytest runs per template and wrong edit
@pytest.mark.parametrize("name", MINE)
def test_visible_tests_tell_every_wrong_first_attempt_from_the_fix(name: str) -> None:
    task = next(iter(TEMPLATES[name].tasks(Split.HELDOUT)))
    attempts = TEMPLATES[name].wrong_edits(dict(task.metadata["params"]))
    assert len(attempts) >= 3
    assert _visible_pass(task.solved_files()) and not _visible_pass(task.files)
    for edits in attempts:
        files = dict(task.files)
        for edit in edits:
            files = edit.apply(files)
        assert not _visible_pass(files), edits
        assert not _passes(task, files), edits


def _shadow_json(task: Task) -> dict[str, str]:
    """The workspace with `settings.json` still broken and a `json.py` whose `loads`
    answers the settings the fix would give (the attack of issue 30)."""
    (fixed,) = [e for e in task.solution if e.path == "settings.json"]
    good = json.loads(fixed.new)
    shadow = f"GOOD = {good!r}\n\n\ndef loads(text, *args, **kwargs):\n    return dict(GOOD)\n"
    return {**task.files, "json.py": shadow}


def test_a_json_shadow_does_not_fix_the_settings() -> None:
    task = _task("fix_config", breakage="trailing_comma")
    attacked = _shadow_json(task)
    report = grade_files(task, attacked)
    assert not report.success
    assert report.failed >= 2, report.output  # the app crashes, and the file does not parse
    assert _passes(task, task.solved_files())
    # The shadow does reach a plain, non-isolated interpreter: the attack is real.
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(Path(tmp), attacked)
        proc = subprocess.run(
            [sys.executable, "app.py"], cwd=tmp, capture_output=True, text=True, timeout=60
        )
    assert proc.returncode == 0 and task.metadata["params"]["service"] in proc.stdout


def _sandbox_backend() -> str:
    from composer_infra.sandbox import default_registry

    for name in ("bwrap", "process"):
        backend = default_registry().backends().get(name)
        if backend is not None and backend.unavailable_reason() is None:
            return name
    pytest.skip("no sandbox backend here")


def test_a_json_shadow_is_graded_failed_in_a_real_sandbox() -> None:
    from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox

    task = _task("fix_config", breakage="single_quotes")
    backend = _sandbox_backend()
    with open_sandbox(task, backend) as sandbox:
        assert sandbox.call(
            "write_file", {"path": "json.py", "content": _shadow_json(task)["json.py"]}
        ).ok
        report = grade_sandbox(sandbox, task)
    assert not report.all_passed, report
    with open_sandbox(task, backend) as sandbox:
        assert sandbox.call(
            "write_file", {"path": "settings.json", "content": task.solved_files()["settings.json"]}
        ).ok
        assert grade_sandbox(sandbox, task).all_passed


def test_a_review_naming_every_code_line_fails() -> None:
    task = _task("review_diff")
    path = next(p for p in task.files if p.endswith(".py") and "/" not in p)
    lines = task.files[path].splitlines()
    every = "".join(f"{path}:{n}\n" for n, text in enumerate(lines, 1) if "return" in text)
    assert _passes(task, task.solved_files())
    assert not _passes(task, {**task.files, "REVIEW.md": every})


def test_memoize_accepts_a_cache_and_rejects_answers_for_the_visible_inputs_only() -> None:
    task = _task("memoize_recursion")
    fn, mod = task.metadata["params"]["function"], task.metadata["params"]["module"]
    path = f"{mod}.py"
    cached = "import functools\n\n\n@functools.lru_cache(maxsize=None)\n" + task.files[path]
    assert _passes(task, {**task.files, path: cached})
    solved = task.solved_files()
    # The visible tests' values, answered from a table; every other input still slow.
    namespace: dict[str, object] = {}
    exec(solved[path], namespace)  # the oracle's (linear) function, to fill the table
    table = {n: namespace[fn](n) for n in (9, 10, 12, 18)}  # type: ignore[operator]
    canned = task.files[path].replace(
        f"def {fn}(n):\n", f"def {fn}(n):\n    if n in {table!r}:\n        return {table!r}[n]\n"
    )
    files = {**task.files, path: canned}
    assert _visible_pass(files)
    assert not _passes(task, files)


def test_batch_queries_counts_with_the_graders_own_store() -> None:
    task = _task("batch_queries")
    # store.py edited so that nothing is ever counted; the code still queries per key.
    silent = task.files["store.py"].replace("self.queries += 1", "pass")
    files = {**task.files, "store.py": silent}
    assert _visible_pass(files)  # the workspace's own count is fooled ...
    report = grade_files(task, files)
    assert report.failed == 3 and "queries; at most 1" in report.output  # ... the grader's is not
    assert _passes(task, task.solved_files())


def test_a_ci_whose_tools_check_nothing_fails() -> None:
    task = _task("fix_ci")
    solved = task.solved_files()
    gutted = {
        **solved,
        "tools/check_version.py": "raise SystemExit(0)\n",
        "tools/smoke.py": 'print("smoke ok")\n',
    }
    assert _visible_pass(gutted)
    report = grade_files(task, gutted)
    assert not report.success
    assert report.failed == 2, report.output  # the version and the wrong-result mutants pass CI
    assert _passes(task, solved)


def test_a_caller_that_bypasses_the_new_api_fails() -> None:
    task = _task("move_callers")
    params = task.metadata["params"]
    solved = task.solved_files()
    callers = [e.path for e in task.solution if e.path != "compat.py"]
    inlined = dict(solved)
    for path in callers:
        inlined[path] = (
            solved[path]
            .replace(f"from core import {params['new']}\n", "")
            .replace(f"{params['new']}(qty=qty, cost=cost)", "cost * qty")
        )
    assert _visible_pass(inlined)
    assert not _passes(task, inlined)
    assert _passes(task, solved)


def test_a_named_tuple_is_not_the_dataclass() -> None:
    task = _task("tuples_to_dataclass")
    record, qty = task.metadata["params"]["record"], task.metadata["params"]["qty"]
    solved = task.solved_files()
    named = (
        "from typing import NamedTuple\n\n\n"
        f"class {record}(NamedTuple):\n    name: str\n    {qty}: int\n    price: int\n"
    )
    stock = (
        solved["stock.py"]
        .replace("from dataclasses import replace", "")
        .replace(f"replace(r, {qty}=r.{qty} + extra)", f"r._replace({qty}=r.{qty} + extra)")
    )
    files = {**solved, "models.py": named, "stock.py": stock}
    assert not _passes(task, files)
    assert _passes(task, solved)
