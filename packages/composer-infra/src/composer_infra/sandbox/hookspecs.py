"""Hook specifications of composer-infra's sandboxes.

Every hook is documented here, where it is declared, so a third party can write a
backend by reading this file alone. Implementations are marked with `hookimpl`
(project ``composer``) and are found in the entry-point group ``composer``::

    # pyproject.toml of a third-party package
    [project.entry-points.composer]
    firecracker = "my_package.sandbox_plugin"

    # my_package/sandbox_plugin.py
    from composer_infra.sandbox import SandboxBackend, hookimpl

    @hookimpl
    def composer_sandbox_backends():
        return [FirecrackerBackend()]

The built-in backends (bwrap, gvisor, process) are registered through this same hook
by `composer_infra.sandbox.backends.builtin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer_hooks import PROJECT, hookimpl, hookspec

if TYPE_CHECKING:
    from composer_infra.sandbox.backend import SandboxBackend

__all__ = ["PROJECT", "composer_sandbox_backends", "hookimpl", "hookspec"]


@hookspec
def composer_sandbox_backends() -> list[SandboxBackend]:
    """Return the sandbox backends this plugin provides.

    :return: a list of `composer_infra.sandbox.SandboxBackend` instances. Each has a
        unique `name`; it is what a task or a config asks for
        (``Sandbox.create(task, backend="firecracker")``). Two plugins giving the same
        name is an error that names both.

    Called once when the backend registry is built (and again when a plugin is added
    while a run is going). A backend that cannot run on this machine should still be
    returned; it reports why through `SandboxBackend.unavailable_reason`, so the error
    a user sees says what to install. A plugin whose hook raises is logged by name and
    left out; the other backends stay usable.
    """
    raise NotImplementedError
