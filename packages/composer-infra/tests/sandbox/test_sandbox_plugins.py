"""Backends come from plugins through the `composer_sandbox_backends` hook."""

from __future__ import annotations

import logging
from pathlib import Path

import pluggy
import pytest
from _sandbox_support import CALC_TASK, TEST_CONFIG

from composer_infra.sandbox import (
    DEFAULT_BACKEND,
    BackendRegistry,
    BackendUnavailable,
    Runtime,
    Sandbox,
    SandboxBackend,
    SandboxConfig,
    UnknownBackend,
    UnsandboxedWarning,
    hookimpl,
)
from composer_infra.sandbox.backends.bwrap import BwrapBackend


class AuditedBwrap(SandboxBackend):
    """A third-party backend: bwrap, with every command written to an audit log."""

    name = "audited-bwrap"
    isolation = "namespaces"

    def __init__(self) -> None:
        self.inner = BwrapBackend()
        self.audit: list[str] = []

    def unavailable_reason(self) -> str | None:
        return self.inner.unavailable_reason()

    def start(
        self,
        workspace: Path,
        config: SandboxConfig,
        *,
        state_dir: Path,
        memory_image: Path | None = None,
    ) -> Runtime:
        runtime = self.inner.start(workspace, config, state_dir=state_dir)
        backend = self

        class Audited(Runtime):
            def __init__(self) -> None:
                self.workspace = runtime.workspace
                self.owner = runtime.owner

            def run(self, command: str, *, timeout: float):  # type: ignore[no-untyped-def]
                backend.audit.append(command)
                return runtime.run(command, timeout=timeout)

            def close(self) -> None:
                runtime.close()

        return Audited()


class AuditPlugin:
    def __init__(self) -> None:
        self.backend = AuditedBwrap()

    @hookimpl
    def composer_sandbox_backends(self) -> list[SandboxBackend]:
        return [self.backend]


class BrokenPlugin:
    @hookimpl
    def composer_sandbox_backends(self) -> list[SandboxBackend]:
        raise RuntimeError("this plugin is broken")


class MissingBackend(SandboxBackend):
    name = "missing"
    isolation = "vm"

    def unavailable_reason(self) -> str | None:
        return "install the frobnicator"

    def start(self, workspace, config, *, state_dir, memory_image=None):  # type: ignore[no-untyped-def]
        raise AssertionError("never started")


def test_builtins_come_through_the_hook() -> None:
    registry = BackendRegistry(load_entry_points=False)
    assert {"bwrap", "gvisor", "process"} <= set(registry.backends())
    assert DEFAULT_BACKEND == "bwrap"
    assert registry.get().name == "bwrap"


def test_third_party_backend_registered_while_running(tmp_path: Path) -> None:
    registry = BackendRegistry(load_entry_points=False)
    with pytest.raises(UnknownBackend, match="audited-bwrap"):
        registry.get("audited-bwrap")
    plugin = AuditPlugin()
    registry.register(plugin, name="audit")
    with Sandbox.create(
        CALC_TASK, "audited-bwrap", config=TEST_CONFIG, registry=registry, work_dir=tmp_path
    ) as sandbox:
        assert sandbox.run("echo audited").output.strip() == "audited"
    assert plugin.backend.audit == ["echo audited"]


def test_a_raising_plugin_is_named_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    registry = BackendRegistry(load_entry_points=False)
    registry.register(BrokenPlugin(), name="broken-plugin")
    with caplog.at_level(logging.ERROR):
        backends = registry.backends()
    assert "bwrap" in backends
    assert "broken-plugin" in caplog.text


def test_duplicate_names_are_an_error() -> None:
    registry = BackendRegistry(load_entry_points=False)

    class Clash:
        @hookimpl
        def composer_sandbox_backends(self) -> list[SandboxBackend]:
            return [BwrapBackend()]

    registry.register(Clash(), name="clash")
    with pytest.raises(ValueError, match="clash"):
        registry.backends()


def test_unavailable_backend_says_what_to_install() -> None:
    registry = BackendRegistry(load_entry_points=False)

    class Plugin:
        @hookimpl
        def composer_sandbox_backends(self) -> list[SandboxBackend]:
            return [MissingBackend()]

    registry.register(Plugin())
    with pytest.raises(BackendUnavailable, match="frobnicator"):
        registry.get("missing")
    assert "missing" not in registry.available()


def test_shared_plugin_manager() -> None:
    """The composition root adds the sandbox hooks to the run's one plugin manager."""
    pm = pluggy.PluginManager("composer")
    registry = BackendRegistry(pm)
    assert registry.pm is pm
    assert "bwrap" in registry.backends()


def test_process_backend_only_by_name_and_warns(tmp_path: Path) -> None:
    with pytest.warns(UnsandboxedWarning, match="isolates nothing"):
        sandbox = Sandbox.create(CALC_TASK, "process", config=TEST_CONFIG, work_dir=tmp_path)
    sandbox.close()
    assert BackendRegistry(load_entry_points=False).backends()["process"].explicit_only
