"""Group-level checkpoints: finished groups persisted as they complete, append-only.

A group is the G episodes sampled for one prompt, with their rewards, advantages and
the policy version of every generated token. Generating one costs many sandbox minutes,
so each is written to its own file the moment it is finished, write-once: a crash after
that point never regenerates it, and a bug that tries to is an error, not a silent
overwrite. The trainer records which groups a step consumed in its step checkpoint; on
resume, groups that exist but were not consumed are trained on, not thrown away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from composer_infra.checkpoint.atomic import remove_temp_entries, write_once_bytes


class EpisodeRecord(BaseModel):
    """One finished episode, as the trainer needs it."""

    episode_id: str
    prompt_tokens: list[int]
    completion_tokens: list[int]
    policy_versions: list[int] = Field(
        description="the policy version that sampled each completion token"
    )
    logprobs: list[float] | None = Field(
        default=None, description="behaviour logprob per completion token"
    )
    reward: float
    advantage: float
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _per_token(self) -> EpisodeRecord:
        n = len(self.completion_tokens)
        if len(self.policy_versions) != n:
            raise ValueError(
                f"{len(self.policy_versions)} policy versions for {n} completion tokens"
            )
        if self.logprobs is not None and len(self.logprobs) != n:
            raise ValueError(f"{len(self.logprobs)} logprobs for {n} completion tokens")
        return self


class FinishedGroup(BaseModel):
    group_id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    prompt_id: int | str
    episodes: list[EpisodeRecord]


class GroupExists(FileExistsError):
    """The group was persisted before; groups are never regenerated or overwritten."""


class GroupStore:
    """One JSON file per finished group under `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        remove_temp_entries(self.root)

    def _path(self, group_id: str) -> Path:
        return self.root / f"{group_id}.json"

    def put(self, group: FinishedGroup) -> Path:
        path = self._path(group.group_id)
        try:
            write_once_bytes(path, group.model_dump_json().encode())
        except FileExistsError:
            raise GroupExists(f"group {group.group_id!r} is already persisted at {path}") from None
        return path

    def __contains__(self, group_id: str) -> bool:
        return self._path(group_id).exists()

    def get(self, group_id: str) -> FinishedGroup:
        return FinishedGroup.model_validate_json(self._path(group_id).read_text())

    def ids(self) -> list[str]:
        return sorted(p.stem for p in self.root.glob("*.json") if not p.name.startswith("."))

    def pending(self, consumed: set[str]) -> list[FinishedGroup]:
        """Persisted groups that no checkpointed step has trained on yet."""
        return [self.get(g) for g in self.ids() if g not in consumed]
