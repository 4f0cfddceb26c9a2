"""composer-infra looks every plugin kind up in the manager it is given; used alone, in one
standalone manager built once a process (never again per `open_store` call)."""

from __future__ import annotations

from pathlib import Path

import pluggy
import pytest

import composer_infra.plugins as infra_plugins
from composer_hooks import PROJECT
from composer_infra.plugins import (
    SANDBOX_BUILTINS,
    STORE_BUILTINS,
    add_infra_plugins,
    standalone_manager,
)
from composer_infra.sandbox import BackendRegistry, default_registry
from composer_infra.store import FileStore, open_store


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A fresh standalone slot, and a record of every manager composer-infra builds."""
    made: list[bool] = []
    real = infra_plugins.new_infra_manager

    def counted(*, load_entry_points: bool = True) -> pluggy.PluginManager:
        made.append(load_entry_points)
        return real(load_entry_points=load_entry_points)

    monkeypatch.setattr(infra_plugins, "_standalone", None)
    monkeypatch.setattr(infra_plugins, "new_infra_manager", counted)
    return made


def test_standalone_use_builds_one_manager_for_every_lookup(
    builds: list[bool], tmp_path: Path
) -> None:
    assert isinstance(open_store(str(tmp_path / "a")), FileStore)
    assert isinstance(open_store((tmp_path / "b").as_uri()), FileStore)
    assert default_registry().get("bwrap").name == "bwrap"
    assert default_registry().pm is standalone_manager()
    assert builds == [True]  # once, with the installed entry points


def test_a_given_manager_is_used_and_nothing_is_built(builds: list[bool], tmp_path: Path) -> None:
    pm = pluggy.PluginManager(PROJECT)
    add_infra_plugins(pm)
    add_infra_plugins(pm)  # a second call changes nothing (no second spec, no second built-in)
    assert {SANDBOX_BUILTINS, STORE_BUILTINS} <= {name for name, _ in pm.list_name_plugin()}
    assert isinstance(open_store(tmp_path.as_uri(), plugin_manager=pm), FileStore)
    assert BackendRegistry(pm).pm is pm and BackendRegistry(pm).get().name == "bwrap"
    assert builds == []
    assert infra_plugins._standalone is None
