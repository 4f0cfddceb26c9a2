"""Open a store from a URL through the plugin manager; the built-in `file` and `s3` backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pluggy

from composer_infra.store import hookspecs
from composer_infra.store.errors import UnknownStoreScheme
from composer_infra.store.hookspecs import hookimpl
from composer_infra.store.objects import FileStore, ObjectStore


class BuiltinStores:
    """The stores that ship with composer-infra, registered as an ordinary plugin."""

    @hookimpl
    def composer_open_store(self, url: str, options: dict[str, Any]) -> ObjectStore | None:
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            # Imported here: boto3 is for s3:// alone, and a plugin manager (a job's, a
            # reward author's light environment) is built without it.
            from composer_infra.store.s3 import S3Store

            return S3Store(url, **options)
        if parsed.scheme == "file":
            if options:
                raise ValueError(f"file:// stores take no options, got {sorted(options)}")
            return FileStore(unquote(parsed.path))
        if parsed.scheme == "" and url:
            # A bare path is a local directory, the common case for a run directory.
            return FileStore(Path(url))
        return None


def add_store_hooks(pm: pluggy.PluginManager) -> None:
    """Add the store hookspec (unless `pm` has it) and `BuiltinStores` (unless a plugin of
    that name is registered) to a plugin manager; calling it again changes nothing.

    `composer_infra.plugins.add_infra_plugins` calls it with the sandbox's counterpart.
    """
    from composer_infra.plugins import STORE_BUILTINS

    if not hasattr(pm.hook, "composer_open_store"):
        pm.add_hookspecs(hookspecs)
    if not pm.has_plugin(STORE_BUILTINS):
        pm.register(BuiltinStores(), name=STORE_BUILTINS)


def make_plugin_manager(*, load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A new plugin manager with composer-infra's hookspecs and built-ins (and, with
    `load_entrypoints`, the installed plugins): `composer_infra.plugins.new_infra_manager`.

    For tests and composer-infra used alone; a job builds one manager for every plugin kind
    (composer-rl) and passes it as ``open_store(url, plugin_manager=pm)``.
    """
    from composer_infra.plugins import new_infra_manager

    return new_infra_manager(load_entry_points=load_entrypoints)


def open_store(
    url: str,
    options: dict[str, Any] | None = None,
    *,
    plugin_manager: pluggy.PluginManager | None = None,
) -> ObjectStore:
    """The object store for `url` (``file://``, ``s3://``, a bare path, or a plugin scheme).

    :param plugin_manager: the manager whose ``composer_open_store`` plugins are asked: a
        job's (composer-rl passes its one manager), or None for composer-infra used alone,
        which asks `composer_infra.plugins.standalone_manager` (built once a process, never
        rebuilt per call). The store hook and built-ins are added to it if missing.
    """
    if plugin_manager is None:
        from composer_infra.plugins import standalone_manager

        plugin_manager = standalone_manager()
    pm = plugin_manager
    add_store_hooks(pm)
    store = pm.hook.composer_open_store(url=url, options=dict(options or {}))
    if store is None:
        scheme = urlparse(url).scheme
        raise UnknownStoreScheme(
            f"no store plugin accepts {url!r} (scheme {scheme!r}); built-in schemes are "
            "file:// and s3://, others need a plugin implementing composer_open_store"
        )
    return store


__all__ = ["BuiltinStores", "add_store_hooks", "make_plugin_manager", "open_store"]
