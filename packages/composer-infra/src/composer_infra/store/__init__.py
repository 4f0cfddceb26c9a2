"""Delta-compressed weight store: publish policy versions, rebuild them anywhere.

See `publisher` (trainer side), `subscriber` (inference side), `objects` / `s3` (stores)
and `hookspecs` (adding a store by plugin).
"""

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
from composer_infra.store.registry import BuiltinStores, make_plugin_manager, open_store
from composer_infra.store.s3 import S3Store
from composer_infra.store.subscriber import WeightSubscriber

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
    "hookimpl",
    "hookspec",
    "make_plugin_manager",
    "open_store",
    "shard_names",
]
