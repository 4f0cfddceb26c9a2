"""The run-time registry, driven in-process step by step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugins_support import importable_plugins  # noqa: F401  (a fixture)

from composer_rewards import Episode, score_episode
from composer_rl.plugins import (
    PluginRegistry,
    build_plugin_manager,
    event_metrics,
    pending,
    processed,
    read_state,
    submit,
)

CONFIG = {"plugins": {"block": ["style"]}, "runtime_test": {"bonus": 0.5}}
EPISODE = Episode(task="t")


@pytest.fixture
def registry(tmp_path: Path, request: pytest.FixtureRequest) -> PluginRegistry:
    request.getfixturevalue("importable_plugins")
    registry = PluginRegistry(build_plugin_manager(CONFIG), tmp_path / "run")
    registry.restore()
    return registry


def test_add_at_a_step_boundary_configures_the_late_plugin(registry: PluginRegistry) -> None:
    run_dir = registry.dirs.root.parent
    assert registry.step_boundary(0) == []
    request = submit(run_dir, "add", "runtime_plugins:Bonus", name="bonus")
    assert [r.id for r in pending(run_dir)] == [request.id]

    (event,) = registry.step_boundary(1)
    assert (event.step, event.action, event.name, event.ok) == (1, "add", "bonus", True)
    assert event_metrics([event]) == {"plugins/add/bonus": 1.0}
    assert pending(run_dir) == []
    answer = processed(run_dir, request.id)
    assert answer is not None and answer.event == event
    # The historic configure hook reached the late plugin: its value comes from the config.
    assert score_episode(registry.pm, EPISODE).metrics()["reward/runtime_bonus"] == 0.5
    state = read_state(run_dir)
    assert state is not None and state.step == 1
    assert state.runtime_added == {"bonus": "runtime_plugins:Bonus"}
    (listed,) = [p for p in state.plugins if p.name == "bonus"]
    assert (listed.source, listed.hooks) == ("runtime", ["composer_configure", "composer_reward"])


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("no_such_package.mod:Plugin", "cannot import module 'no_such_package.mod'"),
        ("runtime_plugins:NotAPlugin", "is not a plugin"),
        ("runtime_plugins:Missing", "has no attribute 'Missing'"),
        ("runtime_plugins:MisspelledHook", "unknown hook 'composer_rewrad'"),
        ("runtime_plugins:ExtraArgument", "temperature"),
        ("a:b:c", "is malformed"),
    ],
)
def test_a_bad_request_is_answered_and_changes_nothing(
    registry: PluginRegistry, spec: str, error: str
) -> None:
    before = sorted(name for name, _ in registry.pm.list_name_plugin())
    submit(registry.dirs.root.parent, "add", spec)
    (event,) = registry.step_boundary(4)
    assert not event.ok and event.step == 4
    assert error in event.error
    assert event_metrics([event]) == {f"plugins/add_failed/{spec}": 1.0}
    assert sorted(name for name, _ in registry.pm.list_name_plugin()) == before
    assert score_episode(registry.pm, EPISODE).failures == ()


def test_a_plugin_whose_configure_fails_is_rejected(registry: PluginRegistry) -> None:
    registry.pm.hook.composer_configure.call_historic(kwargs={"config": {}})  # no runtime_test
    submit(registry.dirs.root.parent, "add", "runtime_plugins:Bonus")
    (event,) = registry.step_boundary(2)
    assert not event.ok and "KeyError" in event.error
    assert not registry.pm.has_plugin("runtime_plugins:Bonus")


def test_names_are_unique(registry: PluginRegistry) -> None:
    run_dir = registry.dirs.root.parent
    submit(run_dir, "add", "runtime_plugins:Bonus", name="length")
    (event,) = registry.step_boundary(1)
    assert not event.ok and "already registered" in event.error


def test_remove_by_name_by_spec_and_builtins(registry: PluginRegistry) -> None:
    run_dir = registry.dirs.root.parent
    submit(run_dir, "add", "runtime_plugins:Bonus")
    submit(run_dir, "add", "runtime_plugins:Broken", name="broken")
    registry.step_boundary(1)
    assert score_episode(registry.pm, EPISODE).failures[0].plugin == "broken"

    submit(run_dir, "remove", "runtime_plugins:Bonus")  # by spec
    submit(run_dir, "remove", "broken")  # by name
    submit(run_dir, "remove", "composer_rewards.rewards.length:LengthPenalty")  # a built-in
    submit(run_dir, "remove", "ghost")
    events = registry.step_boundary(2)
    assert [(e.name, e.ok) for e in events] == [
        ("runtime_plugins:Bonus", True),
        ("broken", True),
        ("length", True),
        ("ghost", False),
    ]
    assert "no plugin named 'ghost'" in events[-1].error
    metrics = score_episode(registry.pm, EPISODE).metrics()
    assert "reward/runtime_bonus" not in metrics and "reward/length" not in metrics
    state = read_state(run_dir)
    assert state is not None
    assert (state.runtime_added, state.runtime_removed) == ({}, ["length"])


@pytest.mark.usefixtures("importable_plugins")
def test_restore_replays_run_time_changes_after_a_restart(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = PluginRegistry(build_plugin_manager(CONFIG), run_dir)
    first.restore()
    submit(run_dir, "add", "runtime_plugins:Bonus", name="bonus")
    submit(run_dir, "remove", "length")
    first.step_boundary(7)

    # The job is killed and resumed: a fresh manager, the same run directory.
    second = PluginRegistry(build_plugin_manager(CONFIG), run_dir)
    events = second.restore()
    assert [(e.step, e.action, e.name, e.ok) for e in events] == [
        (7, "remove", "length", True),
        (7, "add", "bonus", True),
    ]
    metrics = score_episode(second.pm, EPISODE).metrics()
    assert metrics["reward/runtime_bonus"] == 0.5
    assert "reward/length" not in metrics


def test_requests_are_written_atomically(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    request = submit(run_dir, "add", "x:Y")
    files = list((run_dir / "plugins" / "requests").iterdir())
    assert [f.name for f in files] == [f"{request.id}.json"]  # no temporary left behind
    assert json.loads(files[0].read_text())["target"] == "x:Y"
