"""Publish policy weights after each optimizer step, in the background.

The trainer calls `WeightPublisher.publish(state_dict, version)`; the only work done on
its thread is a copy of the tensors to CPU (so it may go on updating them in place).
A background thread then XORs each tensor against the previous version, compresses the
frames in parallel (zstd releases the GIL), uploads the data object and finally the
manifest. Every `snapshot_every` versions, after a failed upload, or when the set of
tensors changes, it writes a full snapshot instead, so a late joiner never replays a
long chain and a broken chain heals itself.

With several ranks, each rank runs its own publisher over its shard of the tensors
(`shard_names`), so uploads are spread over all writers.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from pydantic import BaseModel, Field, model_validator

from composer_infra.store import codec
from composer_infra.store.manifest import (
    RankManifest,
    TensorEntry,
    blob_key,
    manifest_key,
)
from composer_infra.store.objects import ObjectStore

log = logging.getLogger(__name__)


class PublisherConfig(BaseModel):
    """How a publisher writes versions."""

    snapshot_every: int = Field(default=10, ge=1, description="a full snapshot every N versions")
    zstd_level: int = Field(default=3, ge=1, le=22)
    rank: int = Field(default=0, ge=0)
    world_size: int = Field(default=1, ge=1)
    max_pending: int = Field(
        default=2, ge=1, description="versions queued before publish() blocks (back-pressure)"
    )
    encode_threads: int = Field(default=4, ge=1)
    publish_dtype: str | None = Field(
        default=None,
        description="cast floating tensors to this dtype (e.g. 'bfloat16') before publishing",
    )

    @model_validator(mode="after")
    def _check(self) -> PublisherConfig:
        if self.rank >= self.world_size:
            raise ValueError(f"rank={self.rank} must be < world_size={self.world_size}")
        if self.publish_dtype is not None:
            dtype = getattr(torch, self.publish_dtype, None)
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise ValueError(
                    f"publish_dtype={self.publish_dtype!r} is not a torch floating dtype; "
                    "use e.g. 'bfloat16' or 'float16'"
                )
        return self


def shard_names(sizes: Mapping[str, int], world_size: int, rank: int) -> list[str]:
    """The tensor names rank `rank` publishes: a deterministic, byte-balanced split.

    Largest tensors first, each to the least-loaded rank (ties by rank), so every rank
    computes the same assignment from the same sizes without talking to the others.
    """
    loads = [0] * world_size
    owner: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        target = min(range(world_size), key=lambda r: (loads[r], r))
        owner[name] = target
        loads[target] += sizes[name]
    return sorted(name for name, r in owner.items() if r == rank)


class _Job:
    def __init__(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        self.version = version
        self.tensors = tensors
        self.future: Future[RankManifest] = Future()


_STOP = object()


class WeightPublisher:
    """Writes versions of (this rank's share of) the policy to an object store."""

    def __init__(self, store: ObjectStore, config: PublisherConfig | None = None) -> None:
        self.store = store
        self.config = config or PublisherConfig()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=self.config.max_pending)
        self._pool = ThreadPoolExecutor(self.config.encode_threads, thread_name_prefix="wt-encode")
        self._base: dict[str, torch.Tensor] | None = None  # bits of the last uploaded version
        self._base_version: int | None = None
        self._last_submitted: int | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="weight-publisher", daemon=True)
        self._thread.start()

    # -- trainer side ---------------------------------------------------------------

    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> Future[RankManifest]:
        """Queue `version` for publishing and return at once with a future of its manifest.

        Versions must increase. The tensors are copied to CPU before returning.
        """
        if self._closed:
            raise RuntimeError("publish() after close(): make a new WeightPublisher")
        if self._last_submitted is not None and version <= self._last_submitted:
            raise ValueError(
                f"version {version} is not after the last published version {self._last_submitted}"
            )
        self._last_submitted = version
        cast = getattr(torch, self.config.publish_dtype) if self.config.publish_dtype else None
        tensors: dict[str, torch.Tensor] = {}
        for name, tensor in state_dict.items():
            t = tensor.detach()
            if cast is not None and t.is_floating_point():
                t = t.to(cast)
            tensors[name] = t.to("cpu", copy=True)
        job = _Job(version, tensors)
        self._queue.put(job)
        return job.future

    def flush(self) -> None:
        """Wait until everything queued so far is uploaded (or has failed)."""
        self._queue.join()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._pool.shutdown()

    def __enter__(self) -> WeightPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background side ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                assert isinstance(item, _Job)
                try:
                    manifest = self._publish_now(item.version, item.tensors)
                except BaseException as error:
                    # The chain is broken at this version: the next one must be a snapshot.
                    self._base, self._base_version = None, None
                    log.exception("publishing weight version %d failed", item.version)
                    item.future.set_exception(error)
                else:
                    item.future.set_result(manifest)
            finally:
                self._queue.task_done()

    def _is_delta(self, version: int, bits: Mapping[str, torch.Tensor]) -> bool:
        if self._base is None or self._base_version != version - 1:
            return False
        if version % self.config.snapshot_every == 0:
            return False
        if self._base.keys() != bits.keys():
            return False
        return all(
            self._base[n].shape == b.shape and self._base[n].dtype == b.dtype
            for n, b in bits.items()
        )

    def _publish_now(self, version: int, tensors: dict[str, torch.Tensor]) -> RankManifest:
        cfg = self.config
        names = sorted(tensors)
        bits = {name: codec.to_bits(tensors[name]) for name in names}
        delta = self._is_delta(version, bits)
        base = self._base if delta else None

        def encode(name: str) -> tuple[bytes, str]:
            b = bits[name]
            frame = codec.compress(codec.xor_bits(b, base[name] if base else None), cfg.zstd_level)
            return frame, codec.checksum(b)

        encoded = list(self._pool.map(encode, names))
        entries: list[TensorEntry] = []
        offset = 0
        for name, (frame, digest) in zip(names, encoded, strict=True):
            t = tensors[name]
            entries.append(
                TensorEntry(
                    name=name,
                    dtype=codec.dtype_name(t.dtype),
                    shape=list(t.shape),
                    offset=offset,
                    length=len(frame),
                    checksum=digest,
                )
            )
            offset += len(frame)
        blob = b"".join(frame for frame, _ in encoded)
        manifest = RankManifest(
            version=version,
            kind="delta" if delta else "snapshot",
            base_version=version - 1 if delta else None,
            rank=cfg.rank,
            world_size=cfg.world_size,
            blob=blob_key(version, cfg.rank, cfg.world_size),
            blob_size=len(blob),
            tensors=entries,
        )
        self.store.put(manifest.blob, blob)
        # Written last: until this put completes, readers do not see the version.
        self.store.put(
            manifest_key(version, cfg.rank, cfg.world_size),
            manifest.model_dump_json().encode(),
        )
        self._base, self._base_version = bits, version
        return manifest
