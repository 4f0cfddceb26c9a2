"""A toolchain under /tmp (a virtualenv in a checkout there, as a CI clone can be)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from _sandbox_support import TEST_CONFIG

from composer_infra.sandbox import Sandbox

MakeSandbox = Callable[..., Sandbox]


def test_toolchain_under_tmp_stays_visible(backend: str, make_sandbox: MakeSandbox) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        toolchain = Path(folder) / "venv"
        (toolchain / "bin").mkdir(parents=True)
        marker = toolchain / "bin" / "marker.txt"
        marker.write_text("toolchain here\n")
        toolchain.chmod(0o755)
        Path(folder).chmod(0o755)
        config = TEST_CONFIG.model_copy(
            update={"toolchain_paths": (*TEST_CONFIG.toolchain_paths, toolchain)}
        )
        sandbox = make_sandbox(backend, config=config)
        result = sandbox.run(f"cat {marker}")
        assert result.ok and "toolchain here" in result.output, result.output
