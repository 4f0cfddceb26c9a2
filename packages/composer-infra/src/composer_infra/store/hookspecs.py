"""Hook specifications for weight-store backends (pluggy project ``composer``).

A third-party package adds a storage backend by implementing `composer_open_store` in a
module registered under the ``composer`` entry-point group (or registered with the
plugin manager while a run is going)::

    # my_gcs_plugin.py
    from composer_infra.store import hookimpl

    @hookimpl
    def composer_open_store(url, options):
        if url.startswith("gs://"):
            return GcsStore(url, **options)
        return None

    # pyproject.toml
    [project.entry-points.composer]
    gcs = "my_gcs_plugin"

Hooks are documented where they are declared, as pytest's ``hookspec.py`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from composer_hooks import PROJECT, hookimpl, hookspec

if TYPE_CHECKING:
    from composer_infra.store.objects import ObjectStore

PROJECT_NAME = PROJECT
"""Kept for callers that used this module's own name for the project."""

__all__ = ["PROJECT_NAME", "composer_open_store", "hookimpl", "hookspec"]


@hookspec(firstresult=True)
def composer_open_store(url: str, options: dict[str, Any]) -> ObjectStore | None:
    """Open the object store that `url` names, or return None if this plugin does not serve it.

    :param url: The store URL as the user wrote it, e.g. ``s3://bucket/run-1/weights``,
        ``file:///runs/1/weights`` or a plugin's own scheme such as ``gs://...``.
    :param options: Backend-specific keyword options from the configuration (for S3:
        ``endpoint_url``, ``region_name``, ``max_attempts``, ``multipart_chunksize``...).
        A plugin should raise ``ValueError`` naming any option it does not understand.
    :return: An object implementing `composer_infra.store.ObjectStore` (``put``, ``get``,
        ``list``, ``delete`` with atomic puts), or None to let the next plugin try.

    The first non-None result wins (``firstresult``). Plugins registered later are called
    first, so a third-party plugin can override the built-in ``file`` and ``s3`` handlers.
    """
