"""What one writer publishes for one version, and where it lives in the store.

Layout under the store root, one folder per version::

    v000000000042/rank-00000-of-00002.bin            zstd frames, one per tensor
    v000000000042/rank-00000-of-00002.manifest.json  written last
    v000000000042/rank-00001-of-00002.bin
    v000000000042/rank-00001-of-00002.manifest.json

A version is complete when every rank's manifest is there. Because each writer puts its
manifest only after its data object, and stores make puts atomic, a reader that sees all
manifests of a version never sees half of it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, model_validator

FORMAT_VERSION = 1
_MANIFEST_RE = re.compile(r"^v(\d{12})/rank-(\d{5})-of-(\d{5})\.manifest\.json$")


def version_prefix(version: int) -> str:
    return f"v{version:012d}/"


def blob_key(version: int, rank: int, world_size: int) -> str:
    return f"{version_prefix(version)}rank-{rank:05d}-of-{world_size:05d}.bin"


def manifest_key(version: int, rank: int, world_size: int) -> str:
    return f"{version_prefix(version)}rank-{rank:05d}-of-{world_size:05d}.manifest.json"


def parse_manifest_key(key: str) -> tuple[int, int, int] | None:
    """(version, rank, world_size) for a manifest key, None for any other key."""
    match = _MANIFEST_RE.match(key)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3])


class TensorEntry(BaseModel):
    """One tensor: where its frame sits in the blob and the checksum of the rebuilt bits."""

    name: str
    dtype: str
    shape: list[int]
    offset: int = Field(ge=0)
    length: int = Field(ge=0)
    checksum: str


class RankManifest(BaseModel):
    """One writer's part of one version."""

    format: int = FORMAT_VERSION
    version: int = Field(ge=0)
    kind: Literal["snapshot", "delta"]
    base_version: int | None
    rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    blob: str
    blob_size: int = Field(ge=0)
    tensors: list[TensorEntry]

    @model_validator(mode="after")
    def _consistent(self) -> RankManifest:
        if (self.kind == "delta") != (self.base_version is not None):
            raise ValueError("a delta names its base_version; a snapshot has none")
        if self.base_version is not None and self.base_version != self.version - 1:
            raise ValueError(f"delta {self.version} must be based on {self.version - 1}")
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} out of range for world_size {self.world_size}")
        return self
