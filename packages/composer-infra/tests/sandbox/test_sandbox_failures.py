"""Failure paths: a sandbox killed from outside, a closed sandbox, a backend that breaks."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _sandbox_support import CALC_TASK, TEST_CONFIG, backend_unavailable

from composer_infra.environment import EnvironmentConfig, EnvironmentService
from composer_infra.sandbox import Sandbox
from composer_infra.sandbox.backends.gvisor import GVisorRuntime

MakeSandbox = Callable[..., Sandbox]


@pytest.mark.slow
@pytest.mark.skipif(backend_unavailable("gvisor") is not None, reason="gVisor is not available")
def test_gvisor_sandbox_killed_from_outside(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("gvisor")
    runtime = sandbox.runtime
    assert isinstance(runtime, GVisorRuntime)
    subprocess.run(
        [runtime.binary, *runtime.flags, "kill", runtime.container, "KILL"],
        check=False,
        capture_output=True,
    )
    subprocess.run(
        [runtime.binary, *runtime.flags, "delete", "--force", runtime.container],
        check=False,
        capture_output=True,
    )
    result = sandbox.run("echo hi")
    assert not result.ok and result.error
    # The host-side tools still work on the workspace, and closing does not raise.
    assert sandbox.read_file("calc.py").ok
    sandbox.close()


def test_closed_sandbox_answers_with_an_error(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox("bwrap")
    sandbox.close()
    result = sandbox.run("echo hi")
    assert not result.ok and "closed" in (result.error or "")
    with pytest.raises(RuntimeError, match="closed"):
        sandbox.run_tests()


def test_service_survives_a_broken_runtime(tmp_path: Path) -> None:
    config = EnvironmentConfig(warm_sandboxes=0, work_dir=tmp_path, sandbox=TEST_CONFIG)
    with EnvironmentService(config) as service:
        broken, healthy = service.open(CALC_TASK), service.open(CALC_TASK)
        # The workspace vanishes under a running episode (a crashed or wiped worker disk).
        import shutil

        from composer_infra.sandbox.mounts import unmount

        workspace = service.sandbox(broken).workspace
        unmount(workspace)  # a size-limited tmpfs when we are root
        shutil.rmtree(workspace)
        for tool, args in [("run", {"command": "ls"}), ("read_file", {"path": "calc.py"})]:
            result = service.call(broken, tool, args)
            assert not result.ok and result.error
        assert service.call(healthy, "run", {"command": "echo fine"}).output.strip() == "fine"
