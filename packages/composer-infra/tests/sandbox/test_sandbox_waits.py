"""`wait_exited`: the exact wait for runsc's lifecycle commands (no polling sleeps)."""

from __future__ import annotations

import subprocess
import time

import pytest

from composer_infra.sandbox.backends.gvisor import wait_exited


def test_returns_the_exit_status() -> None:
    process = subprocess.Popen(["/bin/sh", "-c", "sleep 0.05; exit 3"])
    assert wait_exited(process, timeout=30) == 3


def test_kills_past_the_timeout() -> None:
    process = subprocess.Popen(["/bin/sleep", "30"])
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        wait_exited(process, timeout=0.2)
    assert time.monotonic() - start < 10
    assert process.returncode is not None  # killed and reaped


def test_waits_on_the_pidfd_not_on_poll_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Popen.wait(timeout) sleeps up to 50 ms between polls; with a pidfd, the only
    Popen.wait left is the reap of a process already gone (no timeout to poll on)."""
    timeouts: list[float | None] = []
    real_wait = subprocess.Popen.wait

    def recording_wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        timeouts.append(timeout)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", recording_wait)
    process = subprocess.Popen(["/bin/sh", "-c", "sleep 0.2"])
    assert wait_exited(process, timeout=30) == 0
    assert timeouts == [None]
