"""What a long run needs from scoring: pluggy's dispatch, no wrappers, time budgets, quiet logs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator

import pluggy
import pytest

from composer_rewards import (
    Episode,
    PluginError,
    PluginScorer,
    RewardComponent,
    hookimpl,
    score_episode,
)

EPISODE = Episode(task="t")


class Good:
    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        return RewardComponent(name="good", value=1.0)


class Wrapper:
    """A third party's wrapper: before this change it was called as a plain reward and
    failed as 'wrong_type' (a generator), which says nothing about what to change."""

    @hookimpl(wrapper=True)
    def composer_reward(self, episode: Episode) -> Generator[None, list[object], list[object]]:
        results = yield
        return results


class OldStyleWrapper:
    @hookimpl(hookwrapper=True)
    def composer_reward(self, episode: Episode) -> Generator[None, object, None]:
        yield


class Slow:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0
        self.release = threading.Event()

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        self.calls += 1
        self.release.wait(self.seconds)
        return RewardComponent(name="slow", value=1.0)


class Raises:
    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        raise ZeroDivisionError("boom")


def test_each_plugin_is_called_through_pluggys_dispatch(pm: pluggy.PluginManager) -> None:
    calls: list[tuple[str, list[str]]] = []

    def before(hook_name: str, impls: list[pluggy.HookImpl], kwargs: object) -> None:
        calls.append((hook_name, [i.plugin_name for i in impls]))

    pm.register(Good(), name="a")
    pm.register(Good(), name="b")
    undo = pm.add_hookcall_monitoring(before, lambda *args: None)
    try:
        score = score_episode(pm, EPISODE)
    finally:
        undo()
    assert [c.plugin for c in score.components] == ["b", "a"]  # pluggy's order: last first
    # pluggy saw one call per plugin, each with that plugin alone.
    assert ("composer_reward", ["b"]) in calls and ("composer_reward", ["a"]) in calls


@pytest.mark.parametrize("wrapper", [Wrapper(), OldStyleWrapper()])
def test_a_wrapper_is_refused_with_a_message_that_says_what_to_change(
    pm: pluggy.PluginManager, wrapper: object
) -> None:
    pm.register(Good(), name="good")
    pm.register(wrapper, name="wrap")
    score = score_episode(pm, EPISODE)
    assert [c.plugin for c in score.components] == ["good"]
    (failure,) = score.failures
    assert (failure.plugin, failure.kind) == ("wrap", "wrapper")
    assert "without wrapper=True" in failure.message
    with pytest.raises(PluginError, match=r"'wrap'.*wrapper"):
        score_episode(pm, EPISODE, strict=True)


def test_a_slow_plugin_is_skipped_for_the_rest_of_the_step(pm: pluggy.PluginManager) -> None:
    slow = Slow(30.0)
    pm.register(Good(), name="good")
    pm.register(slow, name="slow")
    scorer = PluginScorer(pm, budget_s=0.2, over_budget="skip")
    began = time.monotonic()
    first = scorer.score(EPISODE)
    second = scorer.score(EPISODE)  # same step: not called again
    took = time.monotonic() - began
    slow.release.set()
    assert took < 10  # bounded by the budget, not the 30 s sleep
    assert [f.kind for f in first.failures] == ["over_budget"]
    assert "skipped for the rest of this step" in first.failures[0].message
    assert second.failures == () and [c.plugin for c in second.components] == ["good"]
    assert slow.calls == 1
    metrics = scorer.new_step()
    assert metrics == {"plugin_failures/slow/over_budget": 1.0}
    third = scorer.score(EPISODE)  # a new step: tried again (now fast: released)
    assert slow.calls == 2 and {c.plugin for c in third.components} == {"good", "slow"}


def test_a_slow_plugin_is_disabled_when_the_policy_says_so(pm: pluggy.PluginManager) -> None:
    slow = Slow(30.0)
    pm.register(slow, name="slow")
    scorer = PluginScorer(pm, budget_s=0.2, over_budget="disable")
    score = scorer.score(EPISODE)
    slow.release.set()
    assert score.failures[0].kind == "over_budget"
    assert not pm.has_plugin("slow")
    assert "slow" in scorer.disabled and "0.2 s" in scorer.disabled["slow"]
    scorer.new_step()
    assert scorer.score(EPISODE).failures == ()


def test_an_over_budget_call_is_fatal_when_strict(pm: pluggy.PluginManager) -> None:
    slow = Slow(30.0)
    pm.register(slow, name="slow")
    with pytest.raises(PluginError, match="budget"):
        PluginScorer(pm, strict=True, budget_s=0.1).score(EPISODE)
    slow.release.set()


def test_bad_budget_settings_are_refused(pm: pluggy.PluginManager) -> None:
    with pytest.raises(ValueError, match="positive"):
        PluginScorer(pm, budget_s=0)
    with pytest.raises(ValueError, match="'skip' or 'disable'"):
        PluginScorer(pm, over_budget="wait")  # type: ignore[arg-type]


def test_the_first_failure_is_logged_with_its_traceback_then_counted(
    pm: pluggy.PluginManager, caplog: pytest.LogCaptureFixture
) -> None:
    pm.register(Raises(), name="bad")
    scorer = PluginScorer(pm, budget_s=5.0)
    with caplog.at_level(logging.ERROR):
        for _ in range(50):
            assert scorer.score(EPISODE).failures[0].kind == "raised"
        metrics = scorer.new_step()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1
    assert "ZeroDivisionError: boom" in caplog.text and "Traceback" in caplog.text
    assert len(caplog.records) == 2  # the first failure, then one count line for the step
    assert "failed 49 more time(s)" in caplog.records[1].getMessage()
    assert metrics == {"plugin_failures/bad/raised": 50.0}
