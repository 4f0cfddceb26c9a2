"""The pluggy project of Composer and its two markers.

Every Composer package declares its hooks with `hookspec` and every plugin, built-in or
third-party, marks its implementations with `hookimpl`. The project name is also the
entry-point group under which installed plugins are found.
"""

from __future__ import annotations

import pluggy

PROJECT = "composer"
"""The pluggy project name, and the entry-point group (`[project.entry-points.composer]`)."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
