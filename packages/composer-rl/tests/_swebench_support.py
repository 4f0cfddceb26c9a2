"""A SWE-bench-format instance against a git repository a test creates (`acme/calc`:
`add` subtracts; `tests/test_basic.py` checks `sub`, the instance's `test_patch` adds
`tests/test_add.py`), and the sandbox backends the grading attacks run on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from composer_infra.sandbox import default_registry
from composer_rl.tasks import Task
from composer_rl.tasks.swebench import SWEBenchTaskSource

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
BASIC_TEST = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
ADD_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_instance(
    root: Path,
    test_patch_files: dict[str, str] | None = None,
    *,
    name: str = "calc",
    base_tests: dict[str, str] | None = None,
) -> dict[str, object]:
    """The repository under `root/repos/acme__<name>` and its instance (the reference fix
    makes `add` add; `test_patch` adds `tests/test_add.py` and `test_patch_files`; the base
    commit holds `base_tests`, by default `tests/test_basic.py`, whose `test_sub` is the
    instance's PASS_TO_PASS)."""
    base_tests = base_tests or {"tests/test_basic.py": BASIC_TEST}
    repo = root / "repos" / f"acme__{name}"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC)
    for rel, text in base_tests.items():
        (repo / rel).write_text(text)
    (repo / "logo.bin").write_bytes(b"\x89PNG\x00\xff")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text(
        CALC.replace("return a - b\n\n\ndef sub", "return a + b\n\n\ndef sub")
    )
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    added = {"tests/test_add.py": ADD_TEST, **(test_patch_files or {})}
    for rel, text in added.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-N", *added)
    test_patch = git(repo, "diff")
    git(repo, "reset", "-q")
    for rel in added:
        (repo / rel).unlink()
    return {
        "instance_id": f"acme__{name}-1",
        "repo": f"acme/{name}",
        "base_commit": base,
        "problem_statement": "add() subtracts.",
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(["tests/test_add.py::test_add"]),
        "PASS_TO_PASS": [f"{rel}::test_sub" for rel in base_tests],
    }


def source(root: Path, lines: list[str]) -> SWEBenchTaskSource:
    path = root / "instances.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return SWEBenchTaskSource("swe", path, root / "repos")


def load_instance(root: Path, instance: dict[str, object]) -> Task:
    [task] = source(root, [json.dumps(instance)]).load()
    return task


def sandbox_backends() -> list[object]:
    """bwrap and gVisor (slow), each skipped where it is not installed."""
    params: list[object] = []
    for name in ("bwrap", "gvisor"):
        missing = default_registry().backends()[name].unavailable_reason()
        marks = [pytest.mark.skipif(missing is not None, reason=f"{name}: {missing}")]
        if name == "gvisor":
            marks.append(pytest.mark.slow)
        params.append(pytest.param(name, marks=marks))
    return params
