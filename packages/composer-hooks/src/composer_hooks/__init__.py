"""The pluggy project of Composer and its one marker pair.

This package is the only place in the workspace that makes a ``HookspecMarker`` or a
``HookimplMarker``. It depends on pluggy alone, so every package that declares hooks
(composer-rewards' rewards and monitors, composer-infra's sandbox backends and stores,
composer-rl's task sources) imports the pair from here without taking a dependency it does
not otherwise need. A plugin for any of those domains may use ``composer_hooks.hookimpl`` or
a re-export (``composer_rewards.hookimpl``, ``composer_infra.sandbox.hookimpl``,
``composer_infra.store.hookimpl``); they are the same object. The project name is also the
entry-point group under which installed plugins are found (``[project.entry-points.composer]``).

``composer_hooks.todo`` holds the one plain type two of those domains share (the agent's todo
item: sandboxes keep it, reward plugins read it), standard library only.
"""

from __future__ import annotations

import pluggy

PROJECT = "composer"
"""The pluggy project name, and the entry-point group (`[project.entry-points.composer]`)."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["PROJECT", "hookimpl", "hookspec"]
