"""Third-party stores through the `composer_open_store` hook."""

from __future__ import annotations

from typing import Any

import pytest
from _store_helpers import assert_bit_identical, make_state

from composer_infra.store import (
    FileStore,
    ObjectNotFound,
    ObjectStore,
    UnknownStoreScheme,
    WeightPublisher,
    WeightSubscriber,
    hookimpl,
    make_plugin_manager,
    open_store,
)


class MemoryStore:
    """An in-memory store a plugin might ship (e.g. for a shared-memory transport)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = bytes(data)

    def get(self, key: str) -> bytes:
        try:
            return self.objects[key]
        except KeyError:
            raise ObjectNotFound(key) from None

    def list(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


class MemoryPlugin:
    def __init__(self) -> None:
        self.stores: dict[str, MemoryStore] = {}

    @hookimpl
    def composer_open_store(self, url: str, options: dict[str, Any]) -> ObjectStore | None:
        if not url.startswith("mem://"):
            return None
        return self.stores.setdefault(url, MemoryStore(url))


def test_plugin_adds_a_scheme_and_the_weight_store_uses_it() -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(MemoryPlugin())
    store = open_store("mem://weights", plugin_manager=pm)
    assert isinstance(store, MemoryStore) and isinstance(store, ObjectStore)
    state = make_state()
    with WeightPublisher(store) as pub:
        pub.publish(state, 0)
    sub = WeightSubscriber(open_store("mem://weights", plugin_manager=pm))
    assert sub.sync() == 0
    assert_bit_identical(sub.tensors, state)


def test_builtins_still_answer_next_to_a_plugin(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(MemoryPlugin())
    assert isinstance(open_store(tmp_path.as_uri(), plugin_manager=pm), FileStore)


def test_unknown_scheme_says_what_to_do() -> None:
    with pytest.raises(UnknownStoreScheme, match="composer_open_store"):
        open_store("gs://bucket/x", plugin_manager=make_plugin_manager(load_entrypoints=False))


def test_bad_options_are_explained(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="no options"):
        open_store(tmp_path.as_uri(), {"region_name": "x"})
    with pytest.raises(ValueError, match="5 MiB"):
        open_store("s3://b/x", {"multipart_chunksize": 1024})
