"""Publish and subscribe through the file:// store: chains, snapshots, ranks, failures."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from _store_helpers import assert_bit_identical, make_state, train_step

from composer_infra.store import (
    FileStore,
    NoUsableVersion,
    PublisherConfig,
    WeightPublisher,
    WeightSubscriber,
    open_store,
    prune_versions,
    shard_names,
)
from composer_infra.store.manifest import blob_key, manifest_key


def publish_versions(
    store: FileStore, n: int, snapshot_every: int = 4
) -> list[dict[str, torch.Tensor]]:
    states = [make_state()]
    for v in range(1, n):
        states.append(train_step(states[-1], v))
    with WeightPublisher(store, PublisherConfig(snapshot_every=snapshot_every)) as pub:
        futures = [pub.publish(s, v) for v, s in enumerate(states)]
        pub.flush()
    kinds = [f.result().kind for f in futures]
    assert kinds == ["snapshot" if v % snapshot_every == 0 else "delta" for v in range(n)]
    return states


def test_follower_and_late_joiner_rebuild_every_version_bit_identically(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "weights")
    states = [make_state()]
    received: list[int] = []
    follower = WeightSubscriber(store, on_update=lambda sd, v: received.append(v))
    with WeightPublisher(store, PublisherConfig(snapshot_every=4)) as pub:
        for v in range(10):
            if v:
                states.append(train_step(states[-1], v))
            pub.publish(states[-1], v).result()
            assert follower.sync() == v
            assert_bit_identical(follower.tensors, states[v])
    assert received == list(range(10))
    late = WeightSubscriber(store)
    assert late.sync() == 9
    assert_bit_identical(late.tensors, states[9])
    assert late.rejected == [] and follower.rejected == []


def test_deltas_are_much_smaller_than_snapshots(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    publish_versions(store, 3, snapshot_every=100)
    snapshot = len(store.get(blob_key(0, 0, 1)))
    delta = len(store.get(blob_key(1, 0, 1)))
    assert delta < snapshot / 3


def test_publish_does_not_wait_for_the_upload(tmp_path: Path) -> None:
    gate = threading.Event()

    class GatedStore(FileStore):
        def put(self, key: str, data: bytes) -> None:
            gate.wait(timeout=30)
            super().put(key, data)

    store = GatedStore(tmp_path)
    with WeightPublisher(store) as pub:
        future = pub.publish(make_state(), 0)
        assert not future.done()  # the trainer got control back before anything was written
        assert WeightSubscriber(store).latest_version() is None
        gate.set()
        assert future.result(timeout=30).version == 0
    assert WeightSubscriber(store).latest_version() == 0


def test_trainer_may_mutate_tensors_after_publish(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    state = make_state()
    expected = {k: v.clone() for k, v in state.items()}
    with WeightPublisher(store) as pub:
        pub.publish(state, 0)
        for t in state.values():
            t.zero_()
    sub = WeightSubscriber(store)
    sub.sync()
    assert_bit_identical(sub.tensors, expected)


def test_failed_upload_makes_the_next_version_a_snapshot(tmp_path: Path) -> None:
    fail = {"on": False}

    class FlakyStore(FileStore):
        def put(self, key: str, data: bytes) -> None:
            if fail["on"]:
                raise OSError("disk full (simulated)")
            super().put(key, data)

    store = FlakyStore(tmp_path)
    s0 = make_state()
    s1, s2 = train_step(s0, 1), train_step(train_step(s0, 1), 2)
    with WeightPublisher(store, PublisherConfig(snapshot_every=100)) as pub:
        assert pub.publish(s0, 0).result().kind == "snapshot"
        fail["on"] = True
        with pytest.raises(OSError, match="disk full"):
            pub.publish(s1, 1).result()
        fail["on"] = False
        assert pub.publish(s2, 2).result().kind == "snapshot"
    sub = WeightSubscriber(store)
    assert sub.sync() == 2
    assert_bit_identical(sub.tensors, s2)


def test_versions_must_increase(tmp_path: Path) -> None:
    with WeightPublisher(FileStore(tmp_path)) as pub:
        pub.publish(make_state(), 3)
        with pytest.raises(ValueError, match="not after"):
            pub.publish(make_state(), 3)


def test_bad_config_is_explained() -> None:
    with pytest.raises(ValueError, match="publish_dtype"):
        PublisherConfig(publish_dtype="int8")
    with pytest.raises(ValueError, match="world_size"):
        PublisherConfig(rank=2, world_size=2)


def test_sharded_writers_and_incomplete_version(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    world = 3
    states = [make_state()]
    for v in range(1, 4):
        states.append(train_step(states[-1], v))
    sizes = {k: t.numel() * t.element_size() for k, t in states[0].items()}
    shards = [shard_names(sizes, world, r) for r in range(world)]
    assert sorted(n for s in shards for n in s) == sorted(sizes)
    pubs = [WeightPublisher(store, PublisherConfig(rank=r, world_size=world)) for r in range(world)]
    sub = WeightSubscriber(store, readers=3)
    for v, state in enumerate(states[:3]):
        for r, pub in enumerate(pubs):
            pub.publish({k: state[k] for k in shards[r]}, v).result()
        assert sub.sync() == v
        assert_bit_identical(sub.tensors, state)
    # Version 3: two of three ranks finish, the third has not written its manifest yet.
    for r in (0, 1):
        pubs[r].publish({k: states[3][k] for k in shards[r]}, 3).result()
    assert sub.sync() == 2 and sub.latest_version() == 2
    pubs[2].publish({k: states[3][k] for k in shards[2]}, 3).result()
    assert sub.sync() == 3
    assert_bit_identical(sub.tensors, states[3])
    for pub in pubs:
        pub.close()


def test_corrupt_delta_is_rejected_and_snapshot_heals(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    states = publish_versions(store, 6, snapshot_every=4)  # snapshots 0, 4
    follower = WeightSubscriber(store)
    # Corrupt delta 2 before anyone reads it.
    path = tmp_path / blob_key(2, 0, 1)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    # A late joiner goes straight to snapshot 4 and never needs delta 2.
    assert follower.sync() == 5
    assert_bit_identical(follower.tensors, states[5])
    # A reader that holds version 1 must not apply the corrupt delta: it jumps via snapshot 4.
    reader = WeightSubscriber(store)
    reader.version, reader.tensors = 1, {k: v.clone() for k, v in states[1].items()}
    assert reader.sync() == 5
    assert [v for v, _ in reader.rejected] == [2]
    assert_bit_identical(reader.tensors, states[5])


def test_corrupt_snapshot_falls_back_to_the_previous_snapshot(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    states = publish_versions(store, 6, snapshot_every=4)
    path = tmp_path / blob_key(4, 0, 1)
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    sub = WeightSubscriber(store)
    # Snapshot 4 is bad: rebuild from snapshot 0 through deltas 1..3, then stop before 4.
    assert sub.sync() == 3
    assert_bit_identical(sub.tensors, states[3])
    assert 4 in [v for v, _ in sub.rejected]


def test_truncated_upload_is_rejected(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    states = publish_versions(store, 3, snapshot_every=10)
    path = tmp_path / blob_key(2, 0, 1)
    path.write_bytes(path.read_bytes()[:-7])
    sub = WeightSubscriber(store)
    assert sub.sync() == 1
    assert "truncated" in sub.rejected[-1][1]
    assert_bit_identical(sub.tensors, states[1])


def test_missing_delta_stops_the_chain_until_the_next_snapshot(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    states = [make_state()]
    for v in range(1, 9):
        states.append(train_step(states[-1], v))
    sub = WeightSubscriber(store)
    with WeightPublisher(store, PublisherConfig(snapshot_every=8)) as pub:
        for v in range(6):
            pub.publish(states[v], v)
        pub.flush()
        store.delete(blob_key(3, 0, 1))
        store.delete(manifest_key(3, 0, 1))
        assert sub.sync() == 2
        assert any(v == 4 and "base version 3" in why for v, why in sub.rejected)
        for v in range(6, 9):
            pub.publish(states[v], v)
    assert sub.sync() == 8  # snapshot 8 heals the chain
    assert_bit_identical(sub.tensors, states[8])


def test_no_snapshot_at_all_is_a_clear_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    publish_versions(store, 2, snapshot_every=10)
    store.delete(blob_key(0, 0, 1))
    with pytest.raises(NoUsableVersion, match="no complete, intact snapshot"):
        WeightSubscriber(store).sync()


def test_open_store_bare_path_and_file_url(tmp_path: Path) -> None:
    a = open_store(str(tmp_path / "a"))
    b = open_store((tmp_path / "b").as_uri())
    assert isinstance(a, FileStore) and isinstance(b, FileStore)
    b.put("x/y", b"1")
    assert b.list("x") == ["x/y"] and b.get("x/y") == b"1"


def test_prune_keeps_the_newest_snapshots_and_readers_recover(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    states = publish_versions(store, 10, snapshot_every=3)  # snapshots 0, 3, 6, 9
    holder = WeightSubscriber(store)
    holder.version, holder.tensors = 4, {k: v.clone() for k, v in states[4].items()}
    assert prune_versions(store, keep_snapshots=2) == [0, 1, 2, 3, 4, 5]
    assert sorted(WeightSubscriber(store).complete_versions()) == [6, 7, 8, 9]
    assert not any(k.startswith(("v000000000000", "v000000000005")) for k in store.list())
    assert holder.sync() == 9  # its chain is gone: it falls back to snapshot 6 and walks on
    assert_bit_identical(holder.tensors, states[9])
    with pytest.raises(ValueError, match="keep_snapshots"):
        prune_versions(store, keep_snapshots=0)


def test_follower_thread_hands_every_new_version_over(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    seen: list[int] = []
    sub = WeightSubscriber(store, on_update=lambda sd, v: seen.append(v))
    sub.start_following(interval_s=0.02)  # nothing published yet: it waits quietly
    states = [make_state()]
    with WeightPublisher(store) as pub:
        for v in range(3):
            if v:
                states.append(train_step(states[-1], v))
            pub.publish(states[-1], v).result()
            deadline = time.monotonic() + 60
            while sub.version != v and time.monotonic() < deadline:
                time.sleep(0.01)
    sub.close()
    assert seen == [0, 1, 2]
    assert_bit_identical(sub.tensors, states[2])
