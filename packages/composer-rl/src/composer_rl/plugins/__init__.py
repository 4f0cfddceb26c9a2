"""The plugin manager of a Composer run, and adding or removing plugins while it runs.

pm = build_plugin_manager(config)            # hookspecs, built-ins, entry points, configure
registry = PluginRegistry(pm, run_dir)
registry.restore()                           # replay run-time changes after a resume
for step in ...:
    events = registry.step_boundary(step)    # apply `composer-rl plugins add|remove`
    metrics |= event_metrics(events)
    score = composer_rewards.score_episode(pm, episode, strict=settings.strict)
"""

from composer_rl.plugins.manager import (
    HOOKSPEC_MODULES,
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
from composer_rl.plugins.settings import PluginSettings

__all__ = [
    "HOOKSPEC_MODULES",
    "JobState",
    "PluginEvent",
    "PluginRegistry",
    "PluginRequest",
    "PluginSettings",
    "add_hookspecs",
    "build_plugin_manager",
    "event_metrics",
    "new_plugin_manager",
    "pending",
    "processed",
    "read_state",
    "register_checked",
    "submit",
    "validate_spec",
]
