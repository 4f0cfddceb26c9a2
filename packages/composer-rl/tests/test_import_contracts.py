"""The import contracts of the root pyproject.toml (`lint-imports`, run by `nox -s lint`) hold
on this tree, and fail on a copy of it given a back-import.

Each broken copy adds one import to the workspace's sources, copied to a temporary folder,
and runs `lint-imports` there the way the lint session does (the sources on PYTHONPATH,
nothing imported). The broken contracts it reports are exactly the ones that import breaks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())

CYCLE = "no import cycle inside a package"
RL_LAYERS = "composer_rl layers"
LOOP_LAYERS = "composer_rl.rl layers"


def lint_imports(root: Path) -> tuple[int, str, set[str]]:
    """`lint-imports` on the workspace at `root`: exit status, output, broken contracts."""
    sources = os.pathsep.join(str(p / "src") for p in sorted((root / "packages").iterdir()))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True))",
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": sources},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    output = result.stdout + result.stderr
    broken = {m.group(1) for m in re.finditer(r"^(.+?) BROKEN$", output, re.MULTILINE)}
    return result.returncode, output, broken


@pytest.fixture
def workspace_copy(tmp_path: Path) -> Path:
    """The root pyproject.toml and every package's Python sources, copied."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(
            package / "src",
            tmp_path / "packages" / package.name / "src",
            ignore=lambda folder, names: [
                n
                for n in names
                if n == "__pycache__" or not (n.endswith(".py") or (Path(folder) / n).is_dir())
            ],
        )
    return tmp_path


def test_the_tree_keeps_every_import_contract() -> None:
    code, output, broken = lint_imports(ROOT)
    assert code == 0 and not broken, output
    assert re.search(r"Contracts: (\d+) kept, 0 broken", output), output


def _append(root: Path, module: str, text: str) -> None:
    path = root / "packages" / module
    path.write_text(path.read_text() + "\n" + text + "\n")


# (file under packages/, the line added, the contracts it must break)
BACK_IMPORTS = {
    # The cycle removed in issue 32: the hook's return type imported from the sources, which
    # add the hookspecs. Both are tasks modules, so only the cycle check sees it.
    "tasks-hookspecs-sources": (
        "composer-rl/src/composer_rl/tasks/hookspecs.py",
        "from composer_rl.tasks.sources import collect_tasks",
        {CYCLE},
    ),
    # rl/run.py <-> services/training.py, hidden in a function.
    "services-run-in-a-function": (
        "composer-rl/src/composer_rl/rl/services/training.py",
        "def _later() -> None:\n    from composer_rl.rl.run import run_rl  # noqa: F401",
        {LOOP_LAYERS, CYCLE},
    ),
    # agent/episode.py <-> rl/summarize.py: the agent importing the RL loop.
    "agent-rl": (
        "composer-rl/src/composer_rl/agent/transcript.py",
        "from composer_rl.rl.batch import pack",
        {RL_LAYERS, CYCLE},
    ),
    # A type-checking import counts as much as any other.
    "eval-rl-type-checking": (
        "composer-rl/src/composer_rl/eval/stats.py",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from composer_rl.rl.compare import paired_margin",
        {RL_LAYERS, CYCLE},
    ),
    # The package DAG: composer-infra depends on composer-hooks alone.
    "infra-model": (
        "composer-infra/src/composer_infra/store/__init__.py",
        "import composer_model",
        {"composer-infra: only composer-hooks"},
    ),
    "rewards-torch": (
        "composer-rewards/src/composer_rewards/__init__.py",
        "import torch",
        {"composer-rewards: only composer-hooks, no torch"},
    ),
}


@pytest.mark.parametrize("case", sorted(BACK_IMPORTS))
def test_a_back_import_breaks_the_contracts(case: str, workspace_copy: Path) -> None:
    module, line, expected = BACK_IMPORTS[case]
    _append(workspace_copy, module, line)
    code, output, broken = lint_imports(workspace_copy)
    assert code == 1, output
    assert broken == expected, output


def test_a_new_subpackage_must_be_given_a_layer(workspace_copy: Path) -> None:
    new = workspace_copy / "packages" / "composer-rl" / "src" / "composer_rl" / "extra"
    new.mkdir()
    (new / "__init__.py").write_text('"""A subpackage no layer names yet."""\n')
    code, output, broken = lint_imports(workspace_copy)
    assert code == 1 and broken == {RL_LAYERS}, output
    assert "composer_rl.extra" in output
