from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pluggy
import pytest
from conftest import change

from composer_rewards import (
    BUILTIN_PLUGINS,
    Episode,
    PluginSpecError,
    TestResults,
    ToolCall,
    builtin_plugins,
    load_spec,
    plugin_from_object,
    score_episode,
)
from composer_rewards.rewards.length import LengthPenalty


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "my_plugins.py").write_text(
        textwrap.dedent(
            """
            from composer_rewards import RewardComponent, hookimpl

            class Bonus:
                @hookimpl
                def composer_reward(self):
                    return RewardComponent(name="bonus", value=1.0)

            class NeedsArgs:
                def __init__(self, x):
                    self.x = x

                @hookimpl
                def composer_reward(self):
                    return None

            class NotAPlugin:
                def composer_reward(self):
                    return None

            @hookimpl
            def composer_monitor(episode):
                return None

            instance = Bonus()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_plugins"
    sys.modules.pop("my_plugins", None)


def test_load_spec_instantiates_classes_and_keeps_instances_and_modules(
    plugin_module: str,
) -> None:
    assert type(load_spec(f"{plugin_module}:Bonus")).__name__ == "Bonus"
    assert type(load_spec(f"{plugin_module}:instance")).__name__ == "Bonus"
    assert load_spec(plugin_module) is sys.modules[plugin_module]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("a:b:c", "is malformed"),
        ("mod:", "is malformed"),
        ("no_such_module_xyz:Plugin", "cannot import module 'no_such_module_xyz'"),
        ("my_plugins:Missing", "my_plugins has no attribute 'Missing'"),
        ("my_plugins:NotAPlugin", "is not a plugin: it has no function or method marked"),
        ("my_plugins:NeedsArgs", "could not be instantiated without arguments"),
    ],
)
def test_bad_specs_say_what_is_wrong(plugin_module: str, spec: str, message: str) -> None:
    with pytest.raises(PluginSpecError, match=message):
        load_spec(spec)


def test_plugin_from_object_rejects_plain_objects() -> None:
    with pytest.raises(PluginSpecError, match="is not a plugin"):
        plugin_from_object(42, "test")


def test_builtins_disable_and_unknown_names() -> None:
    plugins = builtin_plugins(frozenset({"style"}))
    assert set(plugins) == set(BUILTIN_PLUGINS) - {"style"}
    assert isinstance(plugins["length"], LengthPenalty)
    with pytest.raises(ValueError, match=r"unknown built-in plugins \['stlye'\]"):
        builtin_plugins(frozenset({"stlye"}))


def test_all_builtins_together_through_pluggy(pm: pluggy.PluginManager) -> None:
    for name, plugin in builtin_plugins().items():
        pm.register(plugin, name=name)
    pm.hook.composer_configure.call_historic(
        kwargs={"config": {"rewards": {"correctness": {"weight": 2.0}}}}
    )
    episode: Episode = change(
        {"calc.py": "def total(n):\n    return sum(range(n))\n"},
        {"calc.py": "def total(n):\n    return sum(range(n + 1))\n"},
        final_message="Fixed total() in calc.py to include n. Ran pytest: all 3 tests pass.",
        test_results=TestResults(passed=3),
        tool_calls=[
            ToolCall(name="edit_file", arguments={"path": "calc.py", "old": "n)", "new": "n + 1)"}),
            ToolCall(name="run", arguments={"command": "pytest -q"}, output="3 passed in 0.01s"),
        ],
    )
    score = score_episode(pm, episode, strict=True)
    metrics = score.metrics()
    assert metrics["reward/correctness"] == 1.0
    assert metrics["reward/style"] == 0.0
    assert metrics["reward/unfinished_code"] == 0.0
    assert metrics["reward/false_claim"] == 0.0
    assert metrics["monitor/terminal_collapse/terminal_share"] == 0.5  # one edit, one run
    weights = {c.component.name: c.component.weight for c in score.components}
    assert weights["correctness"] == 2.0
    assert score.total == pytest.approx(sum(c.component.weighted for c in score.components))
    assert score.flags == {}


def test_a_module_without_hooks_is_named_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The message once showed `<module 'x' from '/a/long/pa` cut at 60 characters.
    deep = tmp_path / ("very_long_directory_name_" * 4)
    deep.mkdir()
    (deep / "no_hooks_module_with_a_long_name.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(deep))
    with pytest.raises(PluginSpecError) as info:
        load_spec("no_hooks_module_with_a_long_name")
    message = str(info.value)
    assert "module no_hooks_module_with_a_long_name (" in message
    assert str(deep / "no_hooks_module_with_a_long_name.py") in message
