"""Turning a spec, an entry point or a class into a plugin object pluggy can register.

pluggy registers whatever object it is given and looks for marked methods on it. A class
registered as such would have its methods called without an instance, so here a class is
instantiated (with no arguments; configuration arrives through ``composer_configure``),
while modules and instances are used as they are. The same rule applies to entry points
and to ``package.module:Attribute`` specs given on the command line.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from composer_hooks import PROJECT


class PluginSpecError(ValueError):
    """A plugin spec that cannot be turned into a plugin; the message says what to change."""


def plugin_from_object(obj: object, origin: str) -> object:
    """The object to register for `obj`: an instance of a class, or `obj` itself.

    :raises PluginSpecError: when `obj` implements no ``composer`` hook at all.
    """
    if inspect.isclass(obj):
        try:
            obj = obj()
        except Exception as error:
            raise PluginSpecError(
                f"{origin}: the class could not be instantiated without arguments "
                f"({type(error).__name__}: {error}); give it a no-argument constructor and "
                "read settings in composer_configure(config)"
            ) from error
    if not hook_names(obj):
        raise PluginSpecError(
            f"{origin}: {_describe(obj)} is not a plugin: it has no function or method "
            f"marked with @composer_rewards.hookimpl (pluggy project {PROJECT!r})"
        )
    return obj


def _describe(obj: object) -> str:
    """A short, whole description: ``module a.b (path)`` or ``an instance of a.b.C``."""
    if isinstance(obj, ModuleType):
        where = getattr(obj, "__file__", None)
        return f"module {obj.__name__}" + (f" ({where})" if where else "")
    kind = type(obj)
    return f"an instance of {kind.__module__}.{kind.__qualname__}"


def hook_names(plugin: object) -> list[str]:
    """Names of the attributes of `plugin` marked as ``composer`` hook implementations."""
    marker = f"{PROJECT}_impl"
    names = []
    for name in dir(plugin):
        try:
            attr = getattr(plugin, name)
        except Exception:
            continue
        if inspect.isroutine(attr) and hasattr(attr, marker):
            names.append(name)
    return names


def load_spec(spec: str) -> object:
    """Import ``package.module:Attribute`` (or a bare ``package.module``) and make a plugin.

    :raises PluginSpecError: with a message that says what is wrong with the spec.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not module_name or (sep and not attr_path) or spec.count(":") > 1:
        raise PluginSpecError(
            f"plugin spec {spec!r} is malformed: write package.module:Attribute "
            "(or package.module for a module of hook functions)"
        )
    try:
        target: object = importlib.import_module(module_name)
    except Exception as error:
        raise PluginSpecError(
            f"plugin spec {spec!r}: cannot import module {module_name!r} "
            f"({type(error).__name__}: {error}); is its package installed in this environment?"
        ) from error
    for part in attr_path.split(".") if attr_path else []:
        try:
            target = getattr(target, part)
        except AttributeError as error:
            where = target.__name__ if isinstance(target, ModuleType) else repr(target)
            raise PluginSpecError(
                f"plugin spec {spec!r}: {where} has no attribute {part!r}"
            ) from error
    return plugin_from_object(target, f"plugin spec {spec!r}")


def iter_entry_points(group: str = PROJECT) -> Iterator[EntryPoint]:
    """The installed entry points of `group`, in a stable order."""
    yield from sorted(entry_points(group=group), key=lambda ep: (ep.name, ep.value))


def load_entry_point(ep: EntryPoint) -> object:
    """Load one entry point as a plugin; errors name the entry point and its distribution."""
    dist = ep.dist.name if ep.dist is not None else "unknown distribution"
    origin = f"entry point {ep.name!r} = {ep.value!r} of {dist}"
    try:
        obj = ep.load()
    except Exception as error:
        raise PluginSpecError(f"{origin}: cannot load ({type(error).__name__}: {error})") from error
    return plugin_from_object(obj, origin)
