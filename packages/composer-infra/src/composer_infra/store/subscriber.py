"""Follow the newest complete version in a store and rebuild the weights bit for bit.

The subscriber holds one version. `sync()` looks for the newest complete version and
walks there: from what it holds, delta by delta, when it can; otherwise from the newest
full snapshot. Every rebuilt tensor is checked against the manifest's checksum before
anything is handed over, so the inference engine only ever sees a whole, verified
version. A delta whose base it does not hold, a corrupt or truncated object, or a
missing one stops the walk at the last good version and makes it try the snapshots;
an error is logged and the reader stays on the best version it could rebuild.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from composer_infra.store import codec
from composer_infra.store.errors import (
    BaseMismatch,
    CorruptObject,
    NoUsableVersion,
    WeightStoreError,
)
from composer_infra.store.manifest import RankManifest, parse_manifest_key
from composer_infra.store.objects import ObjectStore

log = logging.getLogger(__name__)

UpdateCallback = Callable[[dict[str, torch.Tensor], int], None]


class Version:
    """All rank manifests of one complete version."""

    def __init__(self, number: int, parts: list[RankManifest]) -> None:
        self.number = number
        self.parts = parts
        kinds = {p.kind for p in parts}
        if len(kinds) != 1:
            raise CorruptObject(f"version {number} mixes snapshot and delta parts: {sorted(kinds)}")
        self.kind = parts[0].kind
        self.base_version = parts[0].base_version


class WeightSubscriber:
    """Rebuilds weights from a store; `sync()` to catch up, `on_update` to hand them over.

    `on_update(state_dict, version)` has the signature of the inference engine's
    ``update_weights``; it receives the subscriber's own tensors, so copy them if you
    mutate them.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        readers: int = 4,
        on_update: UpdateCallback | None = None,
    ) -> None:
        self.store = store
        self.on_update = on_update
        self.version: int | None = None
        self.tensors: dict[str, torch.Tensor] = {}
        self.rejected: list[tuple[int, str]] = []  # (version, why) for every version refused
        self._pool = ThreadPoolExecutor(max(1, readers), thread_name_prefix="wt-read")
        self._follower: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def close(self) -> None:
        self.stop_following()
        self._pool.shutdown()

    # -- following in the background -------------------------------------------------------

    def start_following(self, interval_s: float = 0.5) -> None:
        """Call `sync()` every `interval_s` on a background thread (an inference engine's
        companion): each new version reaches `on_update` without the engine polling."""
        if self._follower is not None:
            raise RuntimeError("already following; call stop_following() first")
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.sync()
                except WeightStoreError as error:  # nothing usable yet: keep waiting
                    log.warning("weight sync failed: %s", error)
                self._stop.wait(interval_s)

        self._follower = threading.Thread(target=loop, name="weight-follower", daemon=True)
        self._follower.start()

    def stop_following(self) -> None:
        if self._follower is not None:
            self._stop.set()
            self._follower.join()
            self._follower = None

    # -- discovery -----------------------------------------------------------------------

    def complete_versions(self) -> dict[int, Version]:
        """Versions whose every rank manifest is in the store (and parses)."""
        found: dict[int, dict[int, str]] = defaultdict(dict)
        sizes: dict[int, set[int]] = defaultdict(set)
        for key in self.store.list("v"):
            parsed = parse_manifest_key(key)
            if parsed is not None:
                version, rank, world_size = parsed
                found[version][rank] = key
                sizes[version].add(world_size)
        complete: dict[int, Version] = {}
        for version, ranks in found.items():
            if len(sizes[version]) != 1:
                self._reject(version, f"ranks disagree on world size: {sorted(sizes[version])}")
                continue
            (world_size,) = sizes[version]
            if len(ranks) != world_size:
                continue  # still uploading, or a crashed writer: not visible yet
            try:
                parts = [
                    RankManifest.model_validate_json(self.store.get(ranks[r]))
                    for r in range(world_size)
                ]
                complete[version] = Version(version, parts)
            except (ValueError, WeightStoreError) as error:
                self._reject(version, f"unreadable manifest: {error}")
        return complete

    def latest_version(self) -> int | None:
        versions = self.complete_versions()
        return max(versions) if versions else None

    # -- catching up -----------------------------------------------------------------------

    def sync(self) -> int | None:
        """Move to the newest version that can be rebuilt; returns the version now held."""
        with self._lock:  # the follower thread and the caller may both sync
            return self._sync()

    def _sync(self) -> int | None:
        versions = self.complete_versions()
        if not versions:
            return self.version
        target = max(versions)
        if self.version == target:
            return self.version
        best: tuple[int, dict[str, torch.Tensor]] | None = None
        if self.version is not None and self.version < target:
            best = self._walk(self.version, self.tensors, target, versions)
        snapshots = sorted(
            (v for v, ver in versions.items() if ver.kind == "snapshot"), reverse=True
        )
        for snapshot in snapshots:
            if best is not None and best[0] >= target:
                break
            if best is not None and snapshot <= best[0]:
                break  # an older snapshot cannot get further than the walk already did
            try:
                tensors = self._rebuild(versions[snapshot], None)
            except WeightStoreError as error:
                self._reject(snapshot, str(error))
                continue
            reached = self._walk(snapshot, tensors, target, versions)
            if best is None or reached[0] > best[0]:
                best = reached
        if best is None:
            if self.version is None:
                raise NoUsableVersion(
                    f"no complete, intact snapshot in {self.store.url}; rejected: {self.rejected[-5:]}"
                )
            return self.version
        if best[0] != self.version:
            self.version, self.tensors = best
            if self.on_update is not None:
                self.on_update(self.tensors, self.version)
        return self.version

    def _walk(
        self,
        start: int,
        tensors: dict[str, torch.Tensor],
        target: int,
        versions: dict[int, Version],
    ) -> tuple[int, dict[str, torch.Tensor]]:
        """Apply versions start+1.. as far as they go; returns the last good one."""
        held, current = start, tensors
        for number in range(start + 1, target + 1):
            version = versions.get(number)
            if version is None:
                later = versions.get(number + 1)
                if later is not None and later.kind == "delta":
                    self._reject(number + 1, f"its base version {number} is missing or incomplete")
                break
            try:
                if version.kind == "delta" and version.base_version != held:
                    raise BaseMismatch(
                        f"delta {number} is based on {version.base_version}, reader holds {held}"
                    )
                current = self._rebuild(version, current if version.kind == "delta" else None)
            except WeightStoreError as error:
                self._reject(number, str(error))
                break
            held = number
        return held, current

    def _rebuild(
        self, version: Version, base: dict[str, torch.Tensor] | None
    ) -> dict[str, torch.Tensor]:
        """The verified tensors of `version`, from `base` if it is a delta."""
        if version.kind == "delta":
            if base is None:
                raise BaseMismatch(f"delta {version.number} needs a base and none is held")
            expected = {e.name for p in version.parts for e in p.tensors}
            if expected != set(base):
                raise BaseMismatch(
                    f"delta {version.number} covers tensors {len(expected)} that differ from the "
                    f"{len(base)} held"
                )
        results = list(self._pool.map(lambda p: self._rebuild_part(p, base), version.parts))
        merged: dict[str, torch.Tensor] = {}
        for part in results:
            overlap = merged.keys() & part.keys()
            if overlap:
                raise CorruptObject(
                    f"version {version.number}: tensors in two ranks: {sorted(overlap)[:3]}"
                )
            merged.update(part)
        return merged

    def _rebuild_part(
        self, part: RankManifest, base: dict[str, torch.Tensor] | None
    ) -> dict[str, torch.Tensor]:
        if part.kind == "delta" and base is None:
            raise BaseMismatch(f"delta {part.version} offered without its base {part.base_version}")
        blob = self.store.get(part.blob)
        if len(blob) != part.blob_size:
            raise CorruptObject(
                f"{part.blob}: {len(blob)} bytes, manifest says {part.blob_size} (truncated upload?)"
            )
        out: dict[str, torch.Tensor] = {}
        for entry in part.tensors:
            what = f"{part.blob}[{entry.name}]"
            dtype = codec.dtype_from_name(entry.dtype)
            bits_dtype = codec.bits_dtype_for(dtype)
            numel = 1
            for d in entry.shape:
                numel *= d
            nbytes = numel * torch.empty((), dtype=dtype).element_size()
            frame = blob[entry.offset : entry.offset + entry.length]
            bits = codec.decompress(frame, nbytes=nbytes, bits_dtype=bits_dtype, what=what)
            if base is not None:
                held = base.get(entry.name)
                if held is None or held.dtype != dtype or list(held.shape) != entry.shape:
                    raise BaseMismatch(f"{what}: held base tensor does not match the delta's")
                bits = torch.bitwise_xor(bits, codec.to_bits(held))
            if codec.checksum(bits) != entry.checksum:
                raise CorruptObject(
                    f"{what}: checksum mismatch after rebuild (corrupt object, or a delta applied "
                    "to the wrong base)"
                )
            out[entry.name] = codec.from_bits(bits, dtype, tuple(entry.shape))
        return out

    def _reject(self, version: int, why: str) -> None:
        log.warning("rejected weight version %d: %s", version, why)
        self.rejected.append((version, why))
