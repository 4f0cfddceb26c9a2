"""The pluggy project of Composer and its one marker pair.

This module is the only place in the workspace that makes a ``HookspecMarker`` or a
``HookimplMarker``: composer-rewards is the lowest package that declares hooks (it needs
neither torch nor ray), so composer-infra's sandbox and store hookspecs and composer-rl's
task hookspecs import `hookspec` and `hookimpl` from here. A plugin for any of those
domains may use ``composer_rewards.hookimpl`` or the re-exports
(``composer_infra.sandbox.hookimpl``, ``composer_infra.store.hookimpl``); they are the same
object. The project name is also the entry-point group under which installed plugins are
found (``[project.entry-points.composer]``).
"""

from __future__ import annotations

import pluggy

PROJECT = "composer"
"""The pluggy project name, and the entry-point group (`[project.entry-points.composer]`)."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
