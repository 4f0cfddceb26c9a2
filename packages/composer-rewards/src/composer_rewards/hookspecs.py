"""Hook specifications for rewards and behaviour monitors.

These are the hooks a reward or monitor plugin implements. Implement any subset as
methods (or module-level functions) marked with :data:`composer_rewards.hookimpl`; a
hook implementation may accept fewer arguments than the spec names, as usual in pluggy.

A plugin is found in three ways: it is built in (composer-rewards' own rewards), it is
installed with an entry point in the group ``composer``::

    [project.entry-points.composer]
    my-reward = "my_package.module:MyReward"   # a class (instantiated), instance or module

or it is added to a running job with ``composer-rl plugins add --run RUN_DIR
my_package.module:MyReward``, in which case the job registers it at its next step boundary.

Hooks are called one plugin at a time (see :func:`composer_rewards.score_episode`): a
plugin that raises, returns the wrong type or returns a non-finite number is named in the
log and the metrics, its signal is left out of that episode, and the run goes on, unless
the run is strict, in which case the error is fatal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from composer_hooks import hookspec
from composer_rewards.episode import Episode
from composer_rewards.results import MonitorReport, RewardComponent


@hookspec(historic=True)
def composer_configure(config: Mapping[str, Any]) -> None:
    """Receive the run's configuration (once, before the first episode).

    :param config: the whole run configuration as plain data (what the run's config file
        and command line resolved to). Each plugin reads its own section, by convention
        ``config["rewards"][<plugin name>]`` for rewards and ``config["monitors"][...]``
        for monitors, and validates it; a bad section should raise with a message that says
        which key to change.

    The hook is historic: a plugin registered later (an entry point loaded late, or one
    added to a running job at step 500) is called with the same configuration as soon as
    it is registered, so it sees exactly what a plugin present at step 0 saw.
    """


@hookspec
def composer_reward(episode: Episode) -> Sequence[RewardComponent] | RewardComponent | None:
    """Score a finished episode.

    :param episode: the read-only text view of the episode.
    :return: one :class:`~composer_rewards.RewardComponent` or a list of them, each named
        and weighted; ``None`` or an empty list when the plugin has nothing to say about
        this episode (for example a Python linter on a change without Python files).

    Component names should be stable across episodes (they become metric names) and
    should not repeat across plugins. The episode reward is the sum of
    ``weight * value`` over every component of every plugin.

    Anything else returned (a bare float, a dict), or a component whose value or weight
    is NaN or infinite, counts as a failure of this plugin for this episode.
    """


@hookspec
def composer_monitor(episode: Episode) -> MonitorReport | None:
    """Watch a finished episode for a behaviour, without changing its reward.

    :param episode: the read-only text view of the episode.
    :return: a :class:`~composer_rewards.MonitorReport` with named metrics (floats, logged
        every episode) and flags (name -> evidence, raised when the behaviour is seen), or
        ``None``.

    Monitors exist to notice emergent behaviours early (reasoning dumped into comments,
    collapse onto the terminal tool, deliberately malformed tool calls, asking instead of
    editing) so that a reward against them can be added once they show up.
    """
