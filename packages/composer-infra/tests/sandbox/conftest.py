"""Fixtures of the sandbox tests: a backend parameter covering every backend present."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from composer_infra.sandbox import (
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    Task,
    UnsandboxedWarning,
    default_registry,
)

BACKENDS = ("bwrap", "gvisor", "process")

# Small limits: a fork bomb or a memory hog must be over in seconds.
TEST_CONFIG = SandboxConfig(
    limits=ResourceLimits(
        cpu_seconds=20,
        memory_bytes=1024**3,
        processes=64,
        file_size_bytes=16 * 1024**2,
        open_files=128,
        tmp_bytes=32 * 1024**2,
    ),
    command_timeout=20,
    output_limit=8 * 1024,
    output_kill_limit=4 * 1024**2,
)

CALC_TASK = Task(
    task_id="calc",
    instruction="Make `add` add.",
    files={
        "calc.py": "def add(a, b):\n    return a - b\n",
        "tests/test_calc.py": (
            "from calc import add\n\n\n"
            "def test_add():\n    assert add(1, 2) == 3\n\n\n"
            "def test_zero():\n    assert add(0, 0) == 0\n"
        ),
    },
    test_command="python -m pytest -q",
)


def backend_unavailable(name: str) -> str | None:
    return default_registry().backends()[name].unavailable_reason()


# gVisor runs every command through `runsc exec` (about ten times bwrap's latency), so its
# share of the suite is `slow`: `nox -s tests` runs it, the Python-version matrix does not.
BACKEND_PARAMS = [
    pytest.param(name, marks=pytest.mark.slow) if name == "gvisor" else name for name in BACKENDS
]


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    reason = backend_unavailable(name)
    if reason:
        pytest.skip(f"backend {name} is not available here: {reason}")
    return name


@pytest.fixture
def make_sandbox(tmp_path: Path) -> Iterator:
    """Sandbox factory; every sandbox it made is closed at the end of the test."""
    made: list[Sandbox] = []

    def make(backend: str, task: Task = CALC_TASK, config: SandboxConfig = TEST_CONFIG) -> Sandbox:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnsandboxedWarning)
            sandbox = Sandbox.create(task, backend, config=config, work_dir=tmp_path / "run")
        made.append(sandbox)
        return sandbox

    (tmp_path / "run").mkdir()
    yield make
    for sandbox in made:
        sandbox.close()
