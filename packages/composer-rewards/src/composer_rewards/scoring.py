"""Calling reward and monitor plugins so that one bad plugin cannot stop a run.

pluggy calls every implementation of a hook in one go and lets the first exception
escape, which would lose every other plugin's signal and, in an RL run, the step. Here
each implementation is called on its own; a plugin that raises, returns the wrong type,
or returns a non-finite number is logged by name, recorded as a failure in the metrics,
and its signal is left out of this episode. With ``strict=True`` the same failure raises
:class:`PluginError` instead (for debugging a plugin, or for runs that must not silently
lose a reward).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pluggy
from pydantic import BaseModel, ConfigDict, Field

from composer_rewards.episode import Episode
from composer_rewards.results import MonitorReport, RewardComponent

logger = logging.getLogger(__name__)

FailureKind = Literal["raised", "wrong_type", "not_finite"]


class PluginError(RuntimeError):
    """A plugin failed while the run was strict."""


class PluginFailure(BaseModel):
    """One plugin's failure on one episode."""

    model_config = ConfigDict(frozen=True)

    plugin: str
    hook: str
    kind: FailureKind
    message: str


class ScoredComponent(BaseModel):
    """A reward component together with the plugin that produced it."""

    model_config = ConfigDict(frozen=True)

    plugin: str
    component: RewardComponent


class EpisodeScore(BaseModel):
    """Everything the plugins said about one episode."""

    model_config = ConfigDict(frozen=True)

    components: tuple[ScoredComponent, ...] = ()
    monitors: dict[str, MonitorReport] = Field(default_factory=dict)
    failures: tuple[PluginFailure, ...] = ()

    @property
    def total(self) -> float:
        """The episode's reward: the weighted sum of every component that was kept."""
        return math.fsum(c.component.weighted for c in self.components)

    @property
    def flags(self) -> dict[str, str]:
        """Every flag raised, keyed ``<plugin>/<flag>``."""
        return {
            f"{plugin}/{name}": evidence
            for plugin, report in self.monitors.items()
            for name, evidence in report.flags.items()
        }

    def metrics(self) -> dict[str, float]:
        """Flat metrics for logging: components, monitor metrics, flags and failures.

        ``reward/<component>`` is the unweighted value, ``reward/total`` the weighted sum,
        ``monitor/<plugin>/<metric>`` a monitor metric, ``flag/<plugin>/<flag>`` is 1 when
        raised, and ``plugin_failure/<plugin>`` is 1 when that plugin failed.
        """
        out: dict[str, float] = {"reward/total": self.total}
        for scored in self.components:
            out[f"reward/{scored.component.name}"] = scored.component.value
        for plugin, report in self.monitors.items():
            for name, value in report.metrics.items():
                out[f"monitor/{plugin}/{name}"] = value
        for key in self.flags:
            out[f"flag/{key}"] = 1.0
        for failure in self.failures:
            out[f"plugin_failure/{failure.plugin}"] = 1.0
        return out


def _plugin_name(pm: pluggy.PluginManager, impl: pluggy.HookImpl) -> str:
    return pm.get_name(impl.plugin) or impl.plugin_name


def _call_each(
    pm: pluggy.PluginManager,
    hook_name: str,
    kwargs: dict[str, Any],
    check: Callable[[object], tuple[FailureKind, str] | None],
    strict: bool,
) -> tuple[list[tuple[str, object]], list[PluginFailure]]:
    """Call every implementation of `hook_name` separately, in pluggy's order."""
    hook: pluggy.HookCaller = getattr(pm.hook, hook_name)
    results: list[tuple[str, object]] = []
    failures: list[PluginFailure] = []
    # pluggy calls the last registered first; keep that order.
    for impl in reversed(hook.get_hookimpls()):
        name = _plugin_name(pm, impl)
        try:
            result = impl.function(*(kwargs[arg] for arg in impl.argnames))
            problem = check(result)
        except Exception as error:
            if strict:
                raise PluginError(f"plugin {name!r} raised in {hook_name}: {error!r}") from error
            problem = ("raised", f"{type(error).__name__}: {error}")
            logger.exception("plugin %r raised in %s; its signal is left out", name, hook_name)
        else:
            if problem is not None:
                if strict:
                    raise PluginError(f"plugin {name!r} failed in {hook_name}: {problem[1]}")
                logger.error(
                    "plugin %r failed in %s (%s): %s; its signal is left out",
                    name,
                    hook_name,
                    problem[0],
                    problem[1],
                )
        if problem is None:
            results.append((name, result))
        else:
            failures.append(
                PluginFailure(plugin=name, hook=hook_name, kind=problem[0], message=problem[1])
            )
    return results, failures


def _as_components(result: object) -> list[RewardComponent] | None:
    if result is None:
        return []
    if isinstance(result, RewardComponent):
        return [result]
    if (
        isinstance(result, Sequence)
        and not isinstance(result, str | bytes)
        and all(isinstance(item, RewardComponent) for item in result)
    ):
        return list(result)
    return None


def _check_reward(result: object) -> tuple[FailureKind, str] | None:
    components = _as_components(result)
    if components is None:
        return (
            "wrong_type",
            f"returned {type(result).__name__} ({result!r:.80}); expected a RewardComponent, "
            "a list of them, or None",
        )
    for component in components:
        if not component.finite:
            return (
                "not_finite",
                f"component {component.name!r} has value {component.value} and weight "
                f"{component.weight}",
            )
    return None


def _check_monitor(result: object) -> tuple[FailureKind, str] | None:
    if result is None:
        return None
    if not isinstance(result, MonitorReport):
        return (
            "wrong_type",
            f"returned {type(result).__name__} ({result!r:.80}); expected a MonitorReport or None",
        )
    if not result.finite:
        bad = [k for k, v in result.metrics.items() if not math.isfinite(v)]
        return ("not_finite", f"metrics {bad} are not finite")
    return None


def score_episode(
    pm: pluggy.PluginManager, episode: Episode, *, strict: bool = False
) -> EpisodeScore:
    """Run every reward and monitor plugin registered in `pm` on `episode`.

    :param pm: a plugin manager of project ``composer`` that has this package's hookspecs.
    :param strict: raise :class:`PluginError` on the first failing plugin instead of
        leaving its signal out.
    """
    kwargs = {"episode": episode}
    rewards, reward_failures = _call_each(pm, "composer_reward", kwargs, _check_reward, strict)
    monitors, monitor_failures = _call_each(pm, "composer_monitor", kwargs, _check_monitor, strict)
    components = [
        ScoredComponent(plugin=plugin, component=component)
        for plugin, result in rewards
        for component in _as_components(result) or []
    ]
    reports = {plugin: result for plugin, result in monitors if isinstance(result, MonitorReport)}
    return EpisodeScore(
        components=tuple(components),
        monitors=reports,
        failures=(*reward_failures, *monitor_failures),
    )
