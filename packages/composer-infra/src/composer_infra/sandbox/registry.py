"""Finding sandbox backends: built-ins, installed plugins, and ones registered at run time.

A `BackendRegistry` is a view of one plugin manager: a job's (composer-rl builds one per job
and passes it down), or, for composer-infra used alone, `composer_infra.plugins`'
process-wide standalone manager (`default_registry`).
"""

from __future__ import annotations

import logging
from types import ModuleType

import pluggy

from composer_infra.sandbox import hookspecs
from composer_infra.sandbox.backend import BackendUnavailable, SandboxBackend

log = logging.getLogger(__name__)

DEFAULT_BACKEND = "bwrap"


class UnknownBackend(LookupError):
    """No plugin provides a backend of that name."""


def add_sandbox_hooks(pm: pluggy.PluginManager) -> None:
    """Add the sandbox hookspecs (unless `pm` has them) and the built-in backends (unless
    registered) to a plugin manager; calling it again changes nothing.

    `composer_infra.plugins.add_infra_plugins` calls it with the store's counterpart.
    """
    from composer_infra.plugins import SANDBOX_BUILTINS
    from composer_infra.sandbox.backends import builtin

    if not hasattr(pm.hook, "composer_sandbox_backends"):
        pm.add_hookspecs(hookspecs)
    if not pm.is_registered(builtin) and not pm.has_plugin(SANDBOX_BUILTINS):
        pm.register(builtin, name=SANDBOX_BUILTINS)


class BackendRegistry:
    """The backends the plugins of a plugin manager provide, by name.

    :param pm: the manager to look backends up in: a job's (the usual case), or None for a
        new one of this registry's own (tests; `load_entry_points` says whether it gets the
        installed plugins). The sandbox hooks and built-ins are added to `pm` if missing.
    """

    def __init__(
        self, pm: pluggy.PluginManager | None = None, *, load_entry_points: bool = True
    ) -> None:
        if pm is None:
            from composer_infra.plugins import new_infra_manager

            pm = new_infra_manager(load_entry_points=load_entry_points)
        else:
            add_sandbox_hooks(pm)
        self.pm = pm

    def register(self, plugin: object | ModuleType, name: str | None = None) -> None:
        """Add a plugin while running (its backends are visible from the next lookup)."""
        self.pm.register(plugin, name=name)

    def backends(self) -> dict[str, SandboxBackend]:
        """Every backend by name. A plugin that raises is logged by name and skipped."""
        found: dict[str, SandboxBackend] = {}
        owners: dict[str, str] = {}
        hook = self.pm.hook.composer_sandbox_backends
        for impl in hook.get_hookimpls():
            try:
                provided = list(impl.function())  # type: ignore[call-overload]
            except Exception:
                log.exception(
                    "sandbox backend plugin %r raised; its backends are left out", impl.plugin_name
                )
                continue
            for backend in provided:
                if not isinstance(backend, SandboxBackend):
                    log.error(
                        "plugin %r returned %r, which is not a SandboxBackend; left out",
                        impl.plugin_name,
                        backend,
                    )
                    continue
                if backend.name in found:
                    raise ValueError(
                        f"sandbox backend {backend.name!r} is provided by both "
                        f"{owners[backend.name]!r} and {impl.plugin_name!r}; remove one plugin"
                    )
                found[backend.name] = backend
                owners[backend.name] = impl.plugin_name
        return found

    def get(self, name: str | None = None) -> SandboxBackend:
        """The backend called `name` (default: bwrap), if it can run here.

        Raises `UnknownBackend` or `BackendUnavailable` with what to do about it.
        """
        backends = self.backends()
        name = name or DEFAULT_BACKEND
        if name not in backends:
            raise UnknownBackend(
                f"no sandbox backend named {name!r}; known: {sorted(backends)}. "
                "Third-party backends register through the `composer_sandbox_backends` hook."
            )
        backend = backends[name]
        reason = backend.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"sandbox backend {name!r} cannot run here: {reason}")
        return backend

    def available(self) -> dict[str, SandboxBackend]:
        """The backends that can run on this machine."""
        return {n: b for n, b in self.backends().items() if b.unavailable_reason() is None}


def default_registry() -> BackendRegistry:
    """The backends of composer-infra used without a job: a view of
    `composer_infra.plugins.standalone_manager` (built once a process, with the built-ins
    and the installed plugins). A job passes its own registry instead."""
    from composer_infra.plugins import standalone_manager

    return BackendRegistry(standalone_manager())
