from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pluggy
import pytest
from plugins_support import importable_plugins  # noqa: F401  (a fixture)
from pydantic import ValidationError

from composer_rewards import BUILTIN_PLUGINS, Episode, PluginSpecError, score_episode
from composer_rl.plugins import (
    HOOKSPEC_MODULES,
    add_hookspecs,
    build_plugin_manager,
    new_plugin_manager,
    validate_spec,
)


def test_hookspec_modules_include_rewards_and_skip_missing_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "composer_rewards.hookspecs" in HOOKSPEC_MODULES
    # Every package of this workspace is installed here, so every module is added.
    assert add_hookspecs(pluggy.PluginManager("composer")) == HOOKSPEC_MODULES
    assert new_plugin_manager().project_name == "composer"
    pm = pluggy.PluginManager("composer")
    added = add_hookspecs(pm, ["composer_rewards.hookspecs", "composer_not_installed.hookspecs"])
    assert added == ["composer_rewards.hookspecs"]
    # A hookspec module that exists but is broken is an error, not a missing package.
    (tmp_path / "broken_specs.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="not_installed_dependency_xyz"):
        add_hookspecs(pm, ["broken_specs"])


def test_builtins_are_registered_and_configured() -> None:
    pm = build_plugin_manager(
        {"plugins": {"block": ["style", "judge"]}, "rewards": {"length": {"weight": 0.5}}}
    )
    names = {name for name, _ in pm.list_name_plugin()}
    assert names >= set(BUILTIN_PLUGINS) - {"style"}
    assert "style" not in names
    assert pm.get_plugin("length").settings.weight == 0.5


@pytest.mark.usefixtures("importable_plugins")
def test_config_specs_are_registered_and_must_load() -> None:
    pm = build_plugin_manager(
        {"plugins": {"plugins": ["runtime_plugins:Bonus"]}, "runtime_test": {"bonus": 2.0}}
    )
    score = score_episode(pm, Episode(task="t"))
    assert score.metrics()["reward/runtime_bonus"] == 2.0
    with pytest.raises(PluginSpecError, match="cannot import module 'nope'"):
        build_plugin_manager({"plugins": {"plugins": ["nope:Plugin"]}})


def test_bad_plugin_settings_are_rejected() -> None:
    with pytest.raises(ValidationError, match="stirct"):
        build_plugin_manager({"plugins": {"stirct": True}})


@pytest.fixture
def installed_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real distribution on the import path: dist-info with entry points, and its module."""
    site = tmp_path / "site"
    info = site / "fake_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [composer]
            fake-good = fake_plugins:Good
            fake-broken = fake_plugins:DoesNotExist
            [other_group]
            ignored = fake_plugins:Good
            """
        )
    )
    (site / "fake_plugins.py").write_text(
        textwrap.dedent(
            """
            from composer_rewards import RewardComponent, hookimpl

            class Good:
                @hookimpl
                def composer_reward(self, episode):
                    return RewardComponent(name="from_entry_point", value=1.0)
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("fake_plugins", None)


def test_entry_points_are_loaded_and_a_broken_one_is_skipped(
    installed_entry_points: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pm = build_plugin_manager()
    assert pm.has_plugin("fake-good") and not pm.has_plugin("fake-broken")
    assert "skipping plugin entry point 'fake-broken'" in caplog.text
    assert "fake-plugins" in caplog.text  # the distribution is named
    assert score_episode(pm, Episode(task="t")).metrics()["reward/from_entry_point"] == 1.0


def test_a_broken_entry_point_is_fatal_when_strict(installed_entry_points: Path) -> None:
    with pytest.raises(PluginSpecError, match="fake-broken"):
        build_plugin_manager({"plugins": {"strict": True}})
    pm = build_plugin_manager({"plugins": {"strict": True, "block": ["fake-broken"]}})
    assert pm.has_plugin("fake-good")


def test_entry_points_can_be_turned_off(installed_entry_points: Path) -> None:
    assert not build_plugin_manager({"plugins": {"entry_points": False}}).has_plugin("fake-good")


@pytest.mark.usefixtures("importable_plugins")
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("runtime_plugins:MisspelledHook", "unknown hook 'composer_rewrad'"),
        ("runtime_plugins:ExtraArgument", "temperature"),
        ("runtime_plugins:NotAPlugin", "is not a plugin"),
    ],
)
def test_validate_spec_checks_against_the_hookspecs(spec: str, message: str) -> None:
    with pytest.raises(PluginSpecError, match=message):
        validate_spec(spec)


@pytest.mark.usefixtures("importable_plugins")
def test_validate_spec_lists_the_hooks() -> None:
    assert validate_spec("runtime_plugins:Bonus") == ["composer_configure", "composer_reward"]
