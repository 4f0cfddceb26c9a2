"""Shared pieces of the sandbox tests (a uniquely named module: `conftest` is not unique
across this package's test folders, so tests import from here, not from conftest)."""

from __future__ import annotations

from composer_infra.sandbox import ResourceLimits, SandboxConfig, Task, default_registry

BACKENDS = ("bwrap", "bwrap-per-command", "gvisor", "process")

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
    id="calc",
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
