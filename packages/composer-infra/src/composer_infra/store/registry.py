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
from composer_infra.store.s3 import S3Store


class BuiltinStores:
    """The stores that ship with composer-infra, registered as an ordinary plugin."""

    @hookimpl
    def composer_open_store(self, url: str, options: dict[str, Any]) -> ObjectStore | None:
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            return S3Store(url, **options)
        if parsed.scheme == "file":
            if options:
                raise ValueError(f"file:// stores take no options, got {sorted(options)}")
            return FileStore(unquote(parsed.path))
        if parsed.scheme == "" and url:
            # A bare path is a local directory, the common case for a run directory.
            return FileStore(Path(url))
        return None


def make_plugin_manager(*, load_entrypoints: bool = True) -> pluggy.PluginManager:
    """A plugin manager with the store hookspecs, the built-ins and installed plugins.

    The composition root (composer-rl) builds one manager for every domain; it calls
    ``pm.add_hookspecs(composer_infra.store.hookspecs)`` and registers `BuiltinStores`.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(BuiltinStores(), name="composer_infra.builtin_stores")
    if load_entrypoints:
        pm.load_setuptools_entrypoints(hookspecs.PROJECT_NAME)
    return pm


def open_store(
    url: str,
    options: dict[str, Any] | None = None,
    *,
    plugin_manager: pluggy.PluginManager | None = None,
) -> ObjectStore:
    """The object store for `url` (``file://``, ``s3://``, a bare path, or a plugin scheme)."""
    pm = plugin_manager or make_plugin_manager()
    if not hasattr(pm.hook, "composer_open_store"):
        pm.add_hookspecs(hookspecs)
    store = pm.hook.composer_open_store(url=url, options=dict(options or {}))
    if store is None:
        scheme = urlparse(url).scheme
        raise UnknownStoreScheme(
            f"no store plugin accepts {url!r} (scheme {scheme!r}); built-in schemes are "
            "file:// and s3://, others need a plugin implementing composer_open_store"
        )
    return store


__all__ = ["BuiltinStores", "make_plugin_manager", "open_store"]
