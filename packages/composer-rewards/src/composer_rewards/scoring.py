"""Calling reward and monitor plugins so that one bad plugin cannot stop a run.

pluggy calls every implementation of a hook in one go and lets the first exception
escape, which would lose every other plugin's signal and, in an RL run, the step. Here
each plugin is called on its own, still through pluggy's dispatch (a subset hook caller
holding that one plugin, so pluggy's tracing and argument handling apply); a plugin that
raises, returns the wrong type, returns a non-finite number or runs past its time budget
is named, recorded as a failure in the metrics, and its signal is left out of this
episode. With ``strict=True`` the same failure raises :class:`PluginError` instead (for
debugging a plugin, or for runs that must not silently lose a reward).

Wrappers (``@hookimpl(wrapper=True)`` or ``hookwrapper=True``) are refused on these
hooks: a wrapper exists to wrap the other plugins' calls, and here each plugin is scored
alone, so its result would be misread. The failure says so and names the plugin.

:func:`score_episode` scores one episode on its own. A job uses :class:`PluginScorer`,
which adds what a long run needs: a time budget per hook call with a policy for a plugin
past it (skip it for the rest of the step, or disable it), and a log that shows the first
failure of each plugin with its traceback and then only counts.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pluggy
from pydantic import BaseModel, ConfigDict, Field

from composer_rewards.episode import Episode
from composer_rewards.results import MonitorReport, RewardComponent

logger = logging.getLogger(__name__)

FailureKind = Literal["raised", "wrong_type", "not_finite", "over_budget", "wrapper"]
OverBudget = Literal["skip", "disable"]
"""What happens to a plugin whose hook call runs past the budget: skipped for the rest of
the step (``skip``) or unregistered for the rest of the run (``disable``)."""


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


class _Outcome:
    """What one plugin's call gave: a result, an exception, or nothing yet (still running)."""

    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = False
        self.result: object = None
        self.error: BaseException | None = None


def _dispatch(
    pm: pluggy.PluginManager, hook_name: str, impl: pluggy.HookImpl, kwargs: dict[str, Any]
) -> object:
    """Call `impl` alone through pluggy: a subset caller that leaves out every other plugin."""
    others = [i.plugin for i in getattr(pm.hook, hook_name).get_hookimpls() if i is not impl]
    caller = pm.subset_hook_caller(hook_name, remove_plugins=others)
    results = caller(**kwargs)
    return results[0] if results else None


def _call_with_budget(call: Any, budget_s: float | None) -> _Outcome:
    """Run `call()`; with a budget, in a daemon thread that is abandoned past the budget.

    Python cannot stop a running function, so a call past its budget keeps running in its
    thread; its result is ignored and the caller moves on. :return: the outcome and the
    seconds waited.
    """
    outcome = _Outcome()

    def run() -> None:
        try:
            outcome.result = call()
        except BaseException as error:  # reported by the caller, never swallowed
            outcome.error = error
        outcome.done = True

    if budget_s is None:
        run()
    else:
        thread = threading.Thread(target=run, name="composer-plugin-call", daemon=True)
        thread.start()
        thread.join(budget_s)
    return outcome


class PluginScorer:
    """Scores episodes with the plugins of `pm`, for a job that runs many steps.

    :param strict: raise :class:`PluginError` on the first failure instead of leaving the
        plugin's signal out.
    :param budget_s: seconds one hook call may take (``None``: no limit, called inline).
    :param over_budget: ``skip`` leaves a plugin past its budget out for the rest of the
        step (until :meth:`new_step`); ``disable`` unregisters it from `pm` for the rest of
        the run and lists it in :attr:`disabled`, so the job can record why.

    The first failure of each (plugin, hook, kind) is logged with its traceback; later ones
    only add to :attr:`failure_counts`, and :meth:`new_step` logs one line per plugin that
    failed again during the step.
    """

    def __init__(
        self,
        pm: pluggy.PluginManager,
        *,
        strict: bool = False,
        budget_s: float | None = None,
        over_budget: OverBudget = "skip",
    ) -> None:
        if budget_s is not None and not budget_s > 0:
            raise ValueError(
                f"budget_s must be a positive number of seconds or None, got {budget_s}"
            )
        if over_budget not in ("skip", "disable"):
            raise ValueError(f"over_budget must be 'skip' or 'disable', got {over_budget!r}")
        self.pm = pm
        self.strict = strict
        self.budget_s = budget_s
        self.over_budget: OverBudget = over_budget
        self.skipped: dict[str, str] = {}
        """Plugins left out until the next step: name -> why."""
        self.disabled: dict[str, str] = {}
        """Plugins this scorer unregistered for running past their budget: name -> why."""
        self.failure_counts: Counter[tuple[str, str, str]] = Counter()
        """(plugin, hook, kind) -> failures since the scorer was made."""
        self._logged_counts: Counter[tuple[str, str, str]] = Counter()

    def score(self, episode: Episode) -> EpisodeScore:
        """Every reward and monitor plugin on `episode` (minus the skipped ones)."""
        kwargs = {"episode": episode}
        rewards, reward_failures = self._call_each("composer_reward", kwargs, _check_reward)
        monitors, monitor_failures = self._call_each("composer_monitor", kwargs, _check_monitor)
        components = [
            ScoredComponent(plugin=plugin, component=component)
            for plugin, result in rewards
            for component in _as_components(result) or []
        ]
        reports = {p: r for p, r in monitors if isinstance(r, MonitorReport)}
        return EpisodeScore(
            components=tuple(components),
            monitors=reports,
            failures=(*reward_failures, *monitor_failures),
        )

    def new_step(self) -> dict[str, float]:
        """Start a step: skipped plugins come back; log the failures counted since the last.

        :return: cumulative failure counts as metrics, ``plugin_failures/<plugin>/<kind>``.
        """
        self.skipped.clear()
        for key, count in sorted(self.failure_counts.items()):
            new = count - self._logged_counts[key]
            if new:
                logger.error(
                    "plugin %r failed %d more time(s) in %s (%s); %d in all",
                    key[0],
                    new,
                    key[1],
                    key[2],
                    count,
                )
        self._logged_counts = Counter(self.failure_counts)
        return self.failure_metrics()

    def failure_metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (plugin, _hook, kind), count in self.failure_counts.items():
            key = f"plugin_failures/{plugin}/{kind}"
            out[key] = out.get(key, 0.0) + count
        return out

    def _call_each(
        self,
        hook_name: str,
        kwargs: dict[str, Any],
        check: Callable[[object], tuple[FailureKind, str] | None],
    ) -> tuple[list[tuple[str, object]], list[PluginFailure]]:
        hook: pluggy.HookCaller = getattr(self.pm.hook, hook_name)
        results: list[tuple[str, object]] = []
        failures: list[PluginFailure] = []
        # pluggy calls the last registered first; keep that order.
        for impl in reversed(hook.get_hookimpls()):
            name = _plugin_name(self.pm, impl)
            if name in self.skipped or not self.pm.is_registered(impl.plugin):
                continue
            problem, result, error = self._call_one(hook_name, impl, name, kwargs, check)
            if problem is None:
                results.append((name, result))
                continue
            failure = PluginFailure(
                plugin=name, hook=hook_name, kind=problem[0], message=problem[1]
            )
            failures.append(failure)
            self._report(failure, error)
        return results, failures

    def _call_one(
        self,
        hook_name: str,
        impl: pluggy.HookImpl,
        name: str,
        kwargs: dict[str, Any],
        check: Callable[[object], tuple[FailureKind, str] | None],
    ) -> tuple[tuple[FailureKind, str] | None, object, BaseException | None]:
        if impl.wrapper or impl.hookwrapper:
            return (
                (
                    "wrapper",
                    f"its {hook_name} is a wrapper; rewards and monitors are scored one plugin "
                    "at a time, so a wrapper cannot see the others' results: mark it "
                    "@hookimpl without wrapper=True/hookwrapper=True and return its own signal",
                ),
                None,
                None,
            )
        outcome = _call_with_budget(
            lambda: _dispatch(self.pm, hook_name, impl, kwargs), self.budget_s
        )
        if not outcome.done:
            if self.over_budget == "disable":
                self.disabled[name] = f"{hook_name} took over {self.budget_s:g} s"
                self.pm.unregister(impl.plugin)
                action = "disabled for the rest of the run"
            else:
                self.skipped[name] = f"{hook_name} took over {self.budget_s:g} s"
                action = "skipped for the rest of this step"
            return (
                (
                    "over_budget",
                    f"{hook_name} ran past its budget of {self.budget_s:g} s; {action}",
                ),
                None,
                None,
            )
        if outcome.error is not None:
            if not isinstance(outcome.error, Exception):
                raise outcome.error  # KeyboardInterrupt, SystemExit: not the plugin's to hide
            error = outcome.error
            return ("raised", f"{type(error).__name__}: {error}"), None, error
        try:
            problem = check(outcome.result)
        except Exception as error:  # a result whose repr or validation raises
            return ("wrong_type", f"{type(error).__name__}: {error}"), None, error
        return problem, outcome.result, None

    def _report(self, failure: PluginFailure, error: BaseException | None) -> None:
        if self.strict:
            raise PluginError(
                f"plugin {failure.plugin!r} failed in {failure.hook} ({failure.kind}): "
                f"{failure.message}"
            ) from error
        key = (failure.plugin, failure.hook, failure.kind)
        self.failure_counts[key] += 1
        if self.failure_counts[key] > 1:
            return  # counted; new_step logs how many more
        self._logged_counts[key] = 1
        logger.error(
            "plugin %r failed in %s (%s): %s; its signal is left out (further failures of "
            "this kind are counted, not logged)",
            failure.plugin,
            failure.hook,
            failure.kind,
            failure.message,
            exc_info=(type(error), error, error.__traceback__) if error is not None else None,
        )


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
    """Run every reward and monitor plugin registered in `pm` on `episode`, once.

    :param pm: a plugin manager of project ``composer`` that has this package's hookspecs.
    :param strict: raise :class:`PluginError` on the first failing plugin instead of
        leaving its signal out.

    No time budget, and every failure is logged with its traceback; a job that scores
    many episodes uses :class:`PluginScorer` instead.
    """
    return PluginScorer(pm, strict=strict).score(episode)
