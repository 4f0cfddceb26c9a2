"""The plugins of one job: its one manager, and every plugin kind looked up through it.

A job (``composer-rl rl``, ``composer-rl eval``) makes one :class:`JobPlugins` from its
configuration and hands it to everything that looks a plugin up::

    plugins = JobPlugins(config)                        # the manager is built once, here
    PluginSession(config, run_dir, command="rl", plugins=plugins)   # rewards and monitors
    plugins.backends.get("bwrap")                       # sandbox backends (a BackendRegistry)
    plugins.open_store("file:///runs/1/weights")        # weight stores
    collect_tasks(Split.TRAIN, sources, pm=plugins.pm)  # built-in and plugin task sources

Lower packages take the manager (or a view of it) as an argument and never build one of
their own for a job: ``BackendRegistry(pm)``, ``open_store(url, plugin_manager=pm)``.
Task sources are asked through `composer_rl.tasks.collect_tasks` with the job's manager
(``pm=plugins.pm``): the task suite sits above the plugins in composer-rl's layers (the root
pyproject's import contracts), so this module does not import it.

A Ray actor gets the job's plugins pickled: the configuration travels, the manager does not
(it holds modules), and the actor builds its own from that configuration once, on first use.
Plugins added to the driver's manager while the job runs (``composer-rl plugins add``) score
episodes in the driver; they do not reach managers already built in actors.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

from composer_rl.plugins.manager import build_plugin_manager

if TYPE_CHECKING:  # composer-infra is imported where it is used
    from composer_infra.sandbox import BackendRegistry
    from composer_infra.store import ObjectStore


class JobPlugins:
    """One job's plugin manager (built once, on first use) and the views of it. Its task
    sources: ``collect_tasks(split, sources, pm=job.pm)``.

    :param config: what plugins see in ``composer_configure``, with the ``plugins`` section
        (`composer_rl.plugins.PluginSettings`); see `build_plugin_manager`.
    :param pm: a manager `build_plugin_manager` made already (default: build one from
        `config`). Pickling keeps `config` only.
    """

    def __init__(
        self, config: Mapping[str, Any] | None = None, *, pm: pluggy.PluginManager | None = None
    ) -> None:
        self.config: dict[str, Any] = dict(config or {})
        self._pm = pm
        self._backends: BackendRegistry | None = None
        self._lock = threading.Lock()

    @property
    def pm(self) -> pluggy.PluginManager:
        """The job's manager: rewards, monitors, sandbox backends, stores, task sources."""
        with self._lock:
            if self._pm is None:
                self._pm = build_plugin_manager(self.config)
            return self._pm

    @property
    def backends(self) -> BackendRegistry:
        """The sandbox backends of the job's manager."""
        from composer_infra.sandbox import BackendRegistry

        pm = self.pm
        with self._lock:
            if self._backends is None:
                self._backends = BackendRegistry(pm)
            return self._backends

    def open_store(self, url: str, options: dict[str, Any] | None = None) -> ObjectStore:
        """The weight store `url` names, from the job's store plugins."""
        from composer_infra.store import open_store

        return open_store(url, options, plugin_manager=self.pm)

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = dict(state["config"])
        self._pm = None  # built in this process, from the configuration, on first use
        self._backends = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        built = "built" if self._pm is not None else "not built"
        return f"JobPlugins({sorted(self.config)}, manager {built})"


__all__ = ["JobPlugins"]
