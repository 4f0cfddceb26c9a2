"""Reward and behaviour-monitor plugins for Composer, with the built-in rewards. No torch.

A plugin implements hooks of :mod:`composer_rewards.hookspecs` marked with
:data:`hookimpl`, and reads a finished :class:`Episode`::

    from composer_rewards import Episode, RewardComponent, hookimpl

    class TestsTouched:
        @hookimpl
        def composer_reward(self, episode: Episode) -> RewardComponent:
            touched = any("test" in path for path in episode.changed_files)
            return RewardComponent(name="tests_touched", value=float(touched), weight=0.1)
"""

from composer_hooks import PROJECT, hookimpl, hookspec
from composer_hooks.todo import TodoItem
from composer_rewards import hookspecs
from composer_rewards.builtin import BUILTIN_PLUGINS, OPTIONAL_PLUGINS, builtin_plugins
from composer_rewards.episode import (
    Episode,
    Message,
    TestResults,
    TokenCounts,
    ToolCall,
)
from composer_rewards.loading import (
    PluginSpecError,
    iter_entry_points,
    load_entry_point,
    load_spec,
    plugin_from_object,
)
from composer_rewards.results import MonitorReport, RewardComponent
from composer_rewards.rewards.length import length_cost, length_x_from_cost
from composer_rewards.scoring import (
    EpisodeScore,
    PluginError,
    PluginFailure,
    PluginScorer,
    ScoredComponent,
    score_episode,
)

__version__ = "0.1.0"

__all__ = [
    "BUILTIN_PLUGINS",
    "OPTIONAL_PLUGINS",
    "PROJECT",
    "Episode",
    "EpisodeScore",
    "Message",
    "MonitorReport",
    "PluginError",
    "PluginFailure",
    "PluginScorer",
    "PluginSpecError",
    "RewardComponent",
    "ScoredComponent",
    "TestResults",
    "TodoItem",
    "TokenCounts",
    "ToolCall",
    "__version__",
    "builtin_plugins",
    "hookimpl",
    "hookspec",
    "hookspecs",
    "iter_entry_points",
    "length_cost",
    "length_x_from_cost",
    "load_entry_point",
    "load_spec",
    "plugin_from_object",
    "score_episode",
]
