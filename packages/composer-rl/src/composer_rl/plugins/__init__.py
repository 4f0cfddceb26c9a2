"""The plugin manager of a Composer run, and adding or removing plugins while it runs.

A long-running job that scores or monitors episodes uses one :class:`PluginSession`::

    with PluginSession(config, run_dir, command="rl") as plugins:
        for step in ...:
            metrics |= plugins.step_boundary(step)   # apply `composer-rl plugins add|remove`
            score = plugins.score(episode)           # budgeted, per-plugin error capture

A command that scores nothing calls :func:`refuse_plugin_requests` on its run directory.
A job's one manager, built once, is its :class:`JobPlugins`: the session scores with it and
sandbox backends, weight stores and task sources are looked up in it.
Underneath: :func:`build_plugin_manager` (hookspecs, built-ins, entry points, configure),
:class:`PluginRegistry` (requests, ``state.json``, restore after a restart) and
:class:`composer_rewards.PluginScorer`.
"""

from composer_rl.plugins.job import JobPlugins
from composer_rl.plugins.manager import (
    HOOKSPEC_MODULES,
    add_builtin_infra,
    add_hookspecs,
    build_plugin_manager,
    new_plugin_manager,
    register_checked,
    validate_spec,
)
from composer_rl.plugins.registry import PluginRegistry, event_metrics
from composer_rl.plugins.requests import (
    JobState,
    PluginEvent,
    PluginRequest,
    pending,
    processed,
    read_state,
    submit,
)
from composer_rl.plugins.session import PluginSession, refuse_plugin_requests
from composer_rl.plugins.settings import PluginSections, PluginSettings

__all__ = [
    "HOOKSPEC_MODULES",
    "JobPlugins",
    "JobState",
    "PluginEvent",
    "PluginRegistry",
    "PluginRequest",
    "PluginSections",
    "PluginSession",
    "PluginSettings",
    "add_builtin_infra",
    "add_hookspecs",
    "build_plugin_manager",
    "event_metrics",
    "new_plugin_manager",
    "pending",
    "processed",
    "read_state",
    "refuse_plugin_requests",
    "register_checked",
    "submit",
    "validate_spec",
]
