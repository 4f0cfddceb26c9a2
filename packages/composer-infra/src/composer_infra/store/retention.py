"""Delete versions nobody needs any more, without ever exposing a broken chain.

A reader needs at most the newest full snapshot and the deltas after it; keeping the
`keep_snapshots` newest snapshots (and everything after the oldest of them) leaves
slow readers room to finish their walk. Manifests are deleted before data objects, so
a version disappears as a whole: a reader either still sees it complete or not at all.
"""

from __future__ import annotations

from composer_infra.store.manifest import parse_manifest_key, version_prefix
from composer_infra.store.objects import ObjectStore
from composer_infra.store.subscriber import WeightSubscriber


def prune_versions(store: ObjectStore, *, keep_snapshots: int = 2) -> list[int]:
    """Delete every version older than the `keep_snapshots`-th newest complete snapshot.

    Returns the versions deleted. Incomplete versions older than that point (crashed
    uploads) are deleted too.
    """
    if keep_snapshots < 1:
        raise ValueError(f"keep_snapshots must be >= 1, got {keep_snapshots}")
    reader = WeightSubscriber(store, readers=1)
    try:
        versions = reader.complete_versions()
    finally:
        reader.close()
    snapshots = sorted((v for v, ver in versions.items() if ver.kind == "snapshot"), reverse=True)
    if len(snapshots) < keep_snapshots:
        return []
    horizon = snapshots[keep_snapshots - 1]
    keys = store.list("v")
    doomed = sorted({int(k[1:13]) for k in keys if k[1:13].isdigit() and int(k[1:13]) < horizon})
    for version in doomed:
        prefix = version_prefix(version)
        own = [k for k in keys if k.startswith(prefix)]
        for key in own:  # manifests first: the version vanishes as a whole
            if parse_manifest_key(key) is not None:
                store.delete(key)
        for key in own:
            if parse_manifest_key(key) is None:
                store.delete(key)
    return doomed
