"""Delta-compressed weight store: publish policy versions, rebuild them anywhere.

See `publisher` (trainer side), `subscriber` (inference side), `objects` / `s3` (stores)
and `hookspecs` (adding a store by plugin).
"""

# Submodules are imported on first use: a process that only needs the light parts (the
# object stores) does not pay for importing torch.
from typing import TYPE_CHECKING

from composer_infra._lazy import lazy_getattr

if TYPE_CHECKING:
    from composer_infra.store.errors import (
        BaseMismatch,
        CorruptObject,
        NoUsableVersion,
        ObjectNotFound,
        UnknownStoreScheme,
        WeightStoreError,
    )
    from composer_infra.store.hookspecs import hookimpl, hookspec
    from composer_infra.store.manifest import RankManifest, TensorEntry
    from composer_infra.store.objects import FileStore, ObjectStore
    from composer_infra.store.publisher import PublisherConfig, WeightPublisher, shard_names
    from composer_infra.store.registry import (
        BuiltinStores,
        add_store_hooks,
        make_plugin_manager,
        open_store,
    )
    from composer_infra.store.retention import prune_versions
    from composer_infra.store.s3 import S3Store
    from composer_infra.store.subscriber import WeightSubscriber

_EXPORTS = {
    "composer_infra.store.errors": (
        "BaseMismatch",
        "CorruptObject",
        "NoUsableVersion",
        "ObjectNotFound",
        "UnknownStoreScheme",
        "WeightStoreError",
    ),
    "composer_infra.store.hookspecs": ("hookimpl", "hookspec"),
    "composer_infra.store.manifest": ("RankManifest", "TensorEntry"),
    "composer_infra.store.objects": ("FileStore", "ObjectStore"),
    "composer_infra.store.publisher": ("PublisherConfig", "WeightPublisher", "shard_names"),
    "composer_infra.store.registry": (
        "BuiltinStores",
        "add_store_hooks",
        "make_plugin_manager",
        "open_store",
    ),
    "composer_infra.store.retention": ("prune_versions",),
    "composer_infra.store.s3": ("S3Store",),
    "composer_infra.store.subscriber": ("WeightSubscriber",),
}

__getattr__ = lazy_getattr(__name__, _EXPORTS)


__all__ = [
    "BaseMismatch",
    "BuiltinStores",
    "CorruptObject",
    "FileStore",
    "NoUsableVersion",
    "ObjectNotFound",
    "ObjectStore",
    "PublisherConfig",
    "RankManifest",
    "S3Store",
    "TensorEntry",
    "UnknownStoreScheme",
    "WeightPublisher",
    "WeightStoreError",
    "WeightSubscriber",
    "add_store_hooks",
    "hookimpl",
    "hookspec",
    "make_plugin_manager",
    "open_store",
    "prune_versions",
    "shard_names",
]
