"""Fixtures of the sandbox tests: a backend parameter covering every backend present."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from _sandbox_support import BACKENDS, CALC_TASK, TEST_CONFIG, backend_unavailable

from composer_infra.sandbox import Sandbox, SandboxConfig, Task, UnsandboxedWarning

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
