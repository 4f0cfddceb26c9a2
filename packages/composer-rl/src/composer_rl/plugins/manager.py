"""Building the plugin manager of a run: every package's hooks and every plugin.

Each package owns the hookspecs of its domain; the composition root adds all of them to
one pluggy ``PluginManager`` of project ``composer``, then registers, in order, the
built-in plugins (composer-rewards' rewards and monitors, composer-infra's sandbox backends
and weight stores), the installed entry points of group ``composer``, and the specs listed
in the run config, and finally calls the historic ``composer_configure`` hook so that
every plugin, including those registered later while the job runs, sees the same
configuration.

This module is the only place in composer-rl that makes a ``PluginManager``; a job builds
one, once, through `composer_rl.plugins.JobPlugins`, and every plugin kind is looked up in it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

import pluggy

from composer_rewards import (
    PROJECT,
    PluginSpecError,
    builtin_plugins,
    iter_entry_points,
    load_entry_point,
    load_spec,
)
from composer_rl.plugins.settings import PluginSettings

logger = logging.getLogger(__name__)

HOOKSPEC_MODULES: list[str] = [
    "composer_rewards.hookspecs",  # rewards and monitors, composer_configure
    "composer_infra.sandbox.hookspecs",  # sandbox backends
    "composer_infra.store.hookspecs",  # weight stores
    "composer_rl.tasks.hookspecs",  # task sources
]
"""Modules whose ``@hookspec`` functions make up the ``composer`` project.

A package that declares hooks appends its module here (for example
``"composer_infra.hookspecs"``); a module that is not installed is skipped, so a
smaller installation still gets a working manager.
"""


def add_hookspecs(pm: pluggy.PluginManager, modules: list[str] | None = None) -> list[str]:
    """Add every importable module of `modules` (default :data:`HOOKSPEC_MODULES`)."""
    added = []
    for name in HOOKSPEC_MODULES if modules is None else modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and name.startswith(error.name):
                logger.debug("hookspec module %s is not installed; skipped", name)
                continue
            raise
        pm.add_hookspecs(module)
        added.append(name)
    return added


def new_plugin_manager() -> pluggy.PluginManager:
    """An empty manager of project ``composer`` with every installed package's hookspecs."""
    pm = pluggy.PluginManager(PROJECT)
    add_hookspecs(pm)
    return pm


def add_builtin_infra(pm: pluggy.PluginManager) -> None:
    """composer-infra's built-in sandbox backends and weight stores, when it is installed."""
    try:
        from composer_infra.plugins import add_infra_plugins
    except ModuleNotFoundError as error:
        if error.name is not None and "composer_infra.plugins".startswith(error.name):
            logger.debug("composer-infra is not installed: no sandbox backends or stores")
            return
        raise
    add_infra_plugins(pm)


def register_checked(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    """Register `plugin` and undo it if it does not fit the hookspecs or its configure fails.

    pluggy validates the signatures against known hooks while registering, replays the
    historic configure hook (which may raise on a bad config section), and reports hooks
    that no spec declares only in ``check_pending``; all three leave the manager as it was.
    """
    if pm.has_plugin(name):
        raise ValueError(f"a plugin named {name!r} is already registered; pick another --name")
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except Exception:
        if pm.is_registered(plugin):
            pm.unregister(plugin)
        raise


def validate_spec(spec: str) -> list[str]:
    """Load `spec` and register it into a throwaway manager: what a job would do.

    :return: the hooks the plugin implements.
    :raises PluginSpecError: with a message that says what to change.
    """
    plugin = load_spec(spec)
    pm = new_plugin_manager()
    try:
        register_checked(pm, plugin, spec)
    except Exception as error:
        raise PluginSpecError(
            f"plugin spec {spec!r} does not fit the composer hooks: {error}"
        ) from error
    return sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])


def build_plugin_manager(config: Mapping[str, Any] | None = None) -> pluggy.PluginManager:
    """The run's plugin manager, configured with `config` (its ``plugins`` section is
    :class:`PluginSettings`).

    A built-in or entry point that fails to load is logged and skipped, unless the run is
    strict; a spec listed in ``plugins.plugins`` always has to load (it was asked for).
    """
    config = dict(config or {})
    settings = PluginSettings.model_validate(config.get("plugins") or {})
    pm = new_plugin_manager()
    blocked = set(settings.block)
    for name, plugin in builtin_plugins().items():
        if name not in blocked:
            register_checked(pm, plugin, name)
    add_builtin_infra(pm)  # before the entry points: a plugin's store or backend is asked first
    if settings.entry_points:
        for ep in iter_entry_points():
            if ep.name in blocked:
                continue
            try:
                register_checked(pm, load_entry_point(ep), ep.name)
            except Exception as error:
                if settings.strict:
                    raise
                logger.error("skipping plugin entry point %r: %s", ep.name, error)
    for spec in settings.plugins:
        register_checked(pm, load_spec(spec), spec)
    pm.hook.composer_configure.call_historic(kwargs={"config": config})
    return pm
