"""Lazy re-exports: a package names what it exports and imports each module on first use.

The weight store, the checkpoints and the Ray runtime pull in torch or ray; a sandbox-side
worker that only needs the light parts should not pay for importing them. Each package
``__init__`` lists its exports as ``module -> names`` and sets
``__getattr__ = lazy_getattr(__name__, EXPORTS)``; type checkers see the real imports
under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping


def lazy_getattr(package: str, exports: Mapping[str, Iterable[str]]) -> Callable[[str], object]:
    """A module-level ``__getattr__``: ``exports`` maps a module to the names it provides;
    the first access of a name imports its module and returns the attribute."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__


__all__ = ["lazy_getattr"]
