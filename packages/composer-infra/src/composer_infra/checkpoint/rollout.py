"""Rollout-level checkpoints: an in-flight episode that another worker can pick up.

A rollout checkpoint holds the tokens generated so far (with logprobs and policy
versions) and an opaque reference to the sandbox snapshot taken at the same point
(the environment service decides what that is: a tarball key, a gVisor checkpoint
path). It lives in an `ObjectStore`, so a worker on another node resumes from S3 as
easily as from the local run directory.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from composer_infra.store.errors import ObjectNotFound
from composer_infra.store.objects import ObjectStore


class RolloutCheckpoint(BaseModel):
    rollout_id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    prompt_id: int | str
    tokens: list[int] = Field(default_factory=list, description="generated tokens so far")
    logprobs: list[float] = Field(default_factory=list)
    policy_versions: list[int] = Field(default_factory=list)
    sandbox_snapshot: str | None = Field(default=None, description="opaque snapshot reference")
    turn: int = 0
    done: bool = False
    worker: str | None = Field(default=None, description="who wrote it (for diagnostics)")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> RolloutCheckpoint:
        n = len(self.tokens)
        if len(self.policy_versions) != n or (self.logprobs and len(self.logprobs) != n):
            raise ValueError(
                f"tokens ({n}), logprobs ({len(self.logprobs)}) and policy_versions "
                f"({len(self.policy_versions)}) must line up"
            )
        return self


class RolloutStore:
    """Save, load and drop rollout checkpoints by id (each save replaces the last, atomically)."""

    def __init__(self, store: ObjectStore, prefix: str = "rollouts/") -> None:
        self.store = store
        self.prefix = prefix

    def _key(self, rollout_id: str) -> str:
        return f"{self.prefix}{rollout_id}.json"

    def save(self, checkpoint: RolloutCheckpoint) -> None:
        self.store.put(self._key(checkpoint.rollout_id), checkpoint.model_dump_json().encode())

    def load(self, rollout_id: str) -> RolloutCheckpoint | None:
        try:
            data = self.store.get(self._key(rollout_id))
        except ObjectNotFound:
            return None
        return RolloutCheckpoint.model_validate_json(data)

    def delete(self, rollout_id: str) -> None:
        self.store.delete(self._key(rollout_id))

    def ids(self) -> list[str]:
        n = len(self.prefix)
        return [
            k[n:].removesuffix(".json") for k in self.store.list(self.prefix) if k.endswith(".json")
        ]
