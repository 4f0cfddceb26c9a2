"""composer-infra's plugins on a pluggy manager: its hookspecs, its built-ins, and the one
manager it builds for itself when no job hands it one.

composer-infra declares two plugin kinds, sandbox backends (`composer_infra.sandbox.hookspecs`)
and weight stores (`composer_infra.store.hookspecs`). It never decides which manager they are
looked up in: every lookup takes a manager (`BackendRegistry(pm)`,
``open_store(url, plugin_manager=pm)``, ``EnvironmentService(registry=...)``,
``Sandbox.create(..., registry=...)``). A job's composition root (composer-rl) builds one
manager for every kind and passes it down, after :func:`add_infra_plugins` put this
package's built-ins on it.

Used on its own, without a job, composer-infra falls back to :func:`standalone_manager`: one
manager for the process, built on first use with the built-ins and the installed entry
points of group ``composer``, and never rebuilt. It is the only place here that loads entry
points; :func:`new_infra_manager` is the only place here that makes a ``PluginManager``.

This module sits below the kinds' registries (they fall back to its standalone manager), so
it names each kind's installer in :data:`INFRA_KINDS` instead of importing it, as
``composer_rl.plugins.HOOKSPEC_MODULES`` names hookspec modules: the root pyproject's
"no import cycle inside a package" contract holds composer-infra to that.
"""

from __future__ import annotations

import importlib
import logging
import threading

import pluggy

from composer_hooks import PROJECT

log = logging.getLogger(__name__)

SANDBOX_BUILTINS = "composer_infra.sandbox.builtin"
"""The plugin name of the built-in sandbox backends (bwrap, gvisor, process)."""
STORE_BUILTINS = "composer_infra.builtin_stores"
"""The plugin name of the built-in weight stores (``file://``, ``s3://``, a bare path)."""

INFRA_KINDS: tuple[tuple[str, str], ...] = (
    ("composer_infra.sandbox.registry", "add_sandbox_hooks"),  # sandbox backends
    ("composer_infra.store.registry", "add_store_hooks"),  # weight stores
)
"""composer-infra's plugin kinds: (module, function) that adds a kind's hookspecs and
built-ins to a manager (unless there already; calling it again changes nothing)."""


def add_infra_plugins(pm: pluggy.PluginManager) -> pluggy.PluginManager:
    """Add composer-infra's hookspecs (those `pm` lacks) and built-in plugins (those not yet
    registered) to `pm`; returns `pm`. Safe to call again on the same manager.

    Register third-party plugins after this: pluggy calls the latest registered first, so a
    plugin's ``file://`` store is asked before the built-in one.
    """
    for module, function in INFRA_KINDS:
        getattr(importlib.import_module(module), function)(pm)
    return pm


def new_infra_manager(*, load_entry_points: bool = True) -> pluggy.PluginManager:
    """A new manager of project ``composer`` with composer-infra's hookspecs and built-ins,
    and (with `load_entry_points`) every installed plugin of entry-point group ``composer``.

    For composer-infra used alone and for tests; a job builds its manager in composer-rl.
    An entry point that fails to load is logged and the built-ins stay usable.
    """
    pm = add_infra_plugins(pluggy.PluginManager(PROJECT))
    if load_entry_points:
        try:
            pm.load_setuptools_entrypoints(PROJECT)
        except Exception:
            log.exception("loading the `composer` entry points failed; built-ins only")
    return pm


_standalone: pluggy.PluginManager | None = None
_standalone_lock = threading.Lock()


def standalone_manager() -> pluggy.PluginManager:
    """The process's manager for composer-infra used without a job, built once.

    What `default_registry()`, ``open_store(url)`` and a `Sandbox` or `EnvironmentService`
    made without a registry look plugins up in. A job never reaches it: it passes its own
    manager to every lookup (composer-rl's tests check that it does).
    """
    global _standalone
    with _standalone_lock:
        if _standalone is None:
            _standalone = new_infra_manager(load_entry_points=True)
        return _standalone


__all__ = [
    "INFRA_KINDS",
    "SANDBOX_BUILTINS",
    "STORE_BUILTINS",
    "add_infra_plugins",
    "new_infra_manager",
    "standalone_manager",
]
