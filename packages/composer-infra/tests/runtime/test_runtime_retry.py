"""A local Ray instance whose raylet misses Ray's fixed startup wait is started once more.

Ray itself is replaced here: the point is what `RayRuntime.start` does with the two
answers `ray.init` can give on a loaded box, without loading a box to get them."""

from __future__ import annotations

from typing import Any

import pytest
import ray

from composer_infra.runtime import RayRuntime

TIMEOUT = Exception(
    "The current node timed out during startup. This could happen because some of the "
    "raylet failed to startup or the GCS has become overloaded."
)


def _fake_ray(monkeypatch: pytest.MonkeyPatch, answers: list[Exception | None]) -> list[str]:
    calls: list[str] = []

    def init(**kwargs: Any) -> None:
        calls.append(f"init {kwargs['address']}")
        answer = answers.pop(0)
        if answer is not None:
            raise answer

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    return calls


def test_a_startup_timeout_is_retried_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_ray(monkeypatch, [TIMEOUT, None])
    runtime = RayRuntime().start()
    assert calls == ["init local", "shutdown", "init local"]
    assert runtime._started_here


def test_a_second_timeout_or_another_error_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_ray(monkeypatch, [TIMEOUT, TIMEOUT])
    with pytest.raises(Exception, match="timed out during startup"):
        RayRuntime().start()
    assert calls == ["init local", "shutdown", "init local"]
    calls = _fake_ray(monkeypatch, [ValueError("object_store_memory is too small")])
    with pytest.raises(ValueError, match="too small"):
        RayRuntime().start()
    assert calls == ["init local"]  # not a startup timeout: no retry
