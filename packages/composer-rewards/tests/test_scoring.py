"""Safe calling: each way a plugin can fail, and strict mode."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import pluggy
import pytest

from composer_rewards import (
    Episode,
    MonitorReport,
    PluginError,
    RewardComponent,
    hookimpl,
    score_episode,
)

EPISODE = Episode(task="t")


class Good:
    @hookimpl
    def composer_reward(self, episode: Episode) -> list[RewardComponent]:
        return [
            RewardComponent(name="a", value=1.0, weight=0.5),
            RewardComponent(name="b", value=-2.0, weight=0.25),
        ]

    @hookimpl
    def composer_monitor(self) -> MonitorReport:  # fewer arguments than the spec: allowed
        return MonitorReport(metrics={"m": 3.0, "on": True}, flags={"seen": "because"})


class Raises:
    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        raise ZeroDivisionError("boom")


class WrongType:
    @hookimpl
    def composer_reward(self, episode: Episode) -> float:
        return 1.0


class NaNValue:
    @hookimpl
    def composer_reward(self, episode: Episode) -> list[RewardComponent]:
        return [
            RewardComponent(name="fine", value=1.0),
            RewardComponent(name="nan", value=math.nan),
        ]


class BadMonitor:
    @hookimpl
    def composer_monitor(self, episode: Episode) -> dict[str, float]:
        return {"m": 1.0}


class InfMonitor:
    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        return MonitorReport(metrics={"m": math.inf})


def test_good_plugin_components_total_and_metrics(pm: pluggy.PluginManager) -> None:
    pm.register(Good(), name="good")
    score = score_episode(pm, EPISODE)
    assert score.failures == ()
    assert score.total == pytest.approx(0.5 * 1.0 + 0.25 * -2.0)
    assert score.flags == {"good/seen": "because"}
    assert score.metrics() == {
        "reward/total": 0.0,
        "reward/a": 1.0,
        "reward/b": -2.0,
        "monitor/good/m": 3.0,
        "monitor/good/on": 1.0,
        "flag/good/seen": 1.0,
    }


@pytest.mark.parametrize(
    ("plugin", "hook", "kind", "text"),
    [
        (Raises(), "composer_reward", "raised", "ZeroDivisionError: boom"),
        (WrongType(), "composer_reward", "wrong_type", "returned float"),
        (NaNValue(), "composer_reward", "not_finite", "'nan'"),
        (BadMonitor(), "composer_monitor", "wrong_type", "returned dict"),
        (InfMonitor(), "composer_monitor", "not_finite", "['m']"),
    ],
)
def test_a_failing_plugin_is_named_and_left_out(
    pm: pluggy.PluginManager,
    caplog: pytest.LogCaptureFixture,
    plugin: object,
    hook: str,
    kind: str,
    text: str,
) -> None:
    pm.register(Good(), name="good")
    pm.register(plugin, name="bad")
    with caplog.at_level(logging.ERROR):
        score = score_episode(pm, EPISODE)
    # The good plugin's signal is intact, the bad one's is gone (all of it: NaNValue's
    # finite component is dropped too), and the failure is in the metrics and the log.
    assert score.total == pytest.approx(0.0)
    assert [c.component.name for c in score.components] == ["a", "b"]
    assert set(score.monitors) == {"good"}
    (failure,) = score.failures
    assert (failure.plugin, failure.hook, failure.kind) == ("bad", hook, kind)
    assert text in failure.message
    assert score.metrics()["plugin_failure/bad"] == 1.0
    assert "'bad'" in caplog.text


@pytest.mark.parametrize("plugin", [Raises(), WrongType(), NaNValue(), BadMonitor()])
def test_strict_makes_a_failure_fatal(pm: pluggy.PluginManager, plugin: object) -> None:
    pm.register(Good(), name="good")
    pm.register(plugin, name="bad")
    with pytest.raises(PluginError, match="'bad'"):
        score_episode(pm, EPISODE, strict=True)


def test_strict_keeps_the_original_exception(pm: pluggy.PluginManager) -> None:
    pm.register(Raises(), name="bad")
    with pytest.raises(PluginError) as info:
        score_episode(pm, EPISODE, strict=True)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_none_and_single_component_are_accepted(pm: pluggy.PluginManager) -> None:
    class Nothing:
        @hookimpl
        def composer_reward(self, episode: Episode) -> None:
            return None

    class Single:
        @hookimpl
        def composer_reward(self, episode: Episode) -> RewardComponent:
            return RewardComponent(name="one", value=2.0, weight=3.0)

    pm.register(Nothing(), name="nothing")
    pm.register(Single(), name="single")
    score = score_episode(pm, EPISODE)
    assert score.failures == ()
    assert score.total == 6.0


def test_configure_is_historic_a_late_plugin_sees_the_same_config(
    pm: pluggy.PluginManager,
) -> None:
    seen: list[tuple[str, Mapping[str, Any]]] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        @hookimpl
        def composer_configure(self, config: Mapping[str, Any]) -> None:
            seen.append((self.name, config))

    config = {"rewards": {"length": {"k": 0.01}}}
    pm.register(Recorder("early"))
    pm.hook.composer_configure.call_historic(kwargs={"config": config})
    assert seen == [("early", config)]
    pm.register(Recorder("late"))  # e.g. added to a running job at step 500
    assert seen == [("early", config), ("late", config)]
