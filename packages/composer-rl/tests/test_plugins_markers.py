"""One pluggy marker pair for the whole workspace (issue 11: four pairs had grown)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import composer_hooks as markers
from composer_rl.plugins import HOOKSPEC_MODULES

PACKAGES = Path(__file__).resolve().parents[2]


def _marker_calls(path: Path) -> list[str]:
    """``HookspecMarker(...)``/``HookimplMarker(...)`` calls in `path`, however spelled."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("HookspecMarker", "HookimplMarker"):
                found.append(f"{path.relative_to(PACKAGES)}:{node.lineno} {name}")
    return found


def test_only_composer_hooks_makes_a_marker_pair() -> None:
    sources = sorted(PACKAGES.glob("*/src/**/*.py"))
    assert len(sources) > 50  # the scan sees the workspace
    calls = [call for path in sources for call in _marker_calls(path)]
    where = "composer-hooks/src/composer_hooks/__init__.py"
    assert sorted(c.split(" ")[1] for c in calls) == ["HookimplMarker", "HookspecMarker"], calls
    assert all(c.startswith(where) for c in calls), calls


def test_every_hookspec_module_uses_the_one_pair() -> None:
    for name in HOOKSPEC_MODULES:
        module = importlib.import_module(name)
        assert module.hookspec is markers.hookspec, name
        if hasattr(module, "hookimpl"):
            assert module.hookimpl is markers.hookimpl, name
    import composer_infra.sandbox as sandbox
    import composer_infra.store as store

    assert sandbox.hookimpl is markers.hookimpl
    assert store.hookimpl is markers.hookimpl
