"""Group-level checkpoints: finished groups persisted as they complete, append-only.

A group is the G episodes sampled for one prompt (their `Trajectory`s), with their
rewards, advantages and the policy version of every generated token. Generating one costs
many sandbox minutes, so each is written to its own file the moment it is finished,
write-once: a crash after that point never regenerates it, and a bug that tries to is an
error, not a silent overwrite. The trainer records which groups a step consumed in its step
checkpoint; on resume, groups that exist but were not consumed are trained on, not thrown
away.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from composer_infra.checkpoint.atomic import remove_temp_entries, write_once_bytes


@dataclass
class Trajectory:
    """One sequence of an episode exactly as the inference engine saw it, token in and token out.

    `tokens` is the whole context (prompt, the policy's tokens, the tool outputs appended
    between turns); `sampled` marks the tokens the policy drew, with their behaviour
    log-probabilities and policy versions; `routing` (when recorded) holds, for every token,
    the experts each MoE layer chose the first time the engine processed it (router replay).
    A self-summarized episode is several trajectories (`segment`) that share its reward.

    This is the one trajectory type from the engine to the trainer: the episode runner
    records into it (`add_context`, `add_sampled`), the RL loop scores it, persists it in
    its group (`FinishedGroup`, as these very fields) and packs it for the trainer; nothing
    is re-tokenized or copied into another record on the way. It lives here, beside the
    group checkpoint, because this is the lowest package both the agent loop and the group
    store import; it needs no torch.
    """

    tokens: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # behaviour logprob (0.0 unsampled)
    versions: list[int] = field(default_factory=list)  # policy version (-1 unsampled)
    routing: list[list[list[int]]] | None = None  # [tokens][moe layers][top_k]
    reward: float | None = None  # None: the infrastructure failed (no reward, not a zero)
    advantage: float | None = None
    group_id: str = ""
    episode_id: str = ""
    segment: int = 0  # index within a self-summarized episode
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        lengths = {
            "sampled": len(self.sampled),
            "logprobs": len(self.logprobs),
            "versions": len(self.versions),
        }
        if self.routing is not None:
            lengths["routing"] = len(self.routing)
        wrong = {k: v for k, v in lengths.items() if v != n}
        if wrong:
            raise ValueError(f"trajectory of {n} tokens has per-token fields of lengths {wrong}")
        if self.sampled and self.sampled[0]:
            raise ValueError("the first token of a trajectory is context, never sampled")
        bad = [
            i
            for i, (s, v) in enumerate(zip(self.sampled, self.versions, strict=True))
            if s and v < 0
        ]
        if bad:
            raise ValueError(f"sampled tokens {bad[:5]} carry no policy version")

    def add_context(self, ids: list[int]) -> None:
        """Tokens the policy did not sample (the prompt, a tool's output): never trained on."""
        self.tokens += ids
        self.sampled += [False] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [-1] * len(ids)

    def add_sampled(
        self,
        ids: list[int],
        logprobs: list[float],
        versions: list[int],
        routing: list[list[list[int]]] | None = None,
    ) -> None:
        """Tokens the policy sampled, with their behaviour logprobs and policy versions;
        `routing`: rows for the tokens whose experts are first known now (context since
        the last rows, then these), appended after the earlier ones."""
        n = len(ids)
        if len(logprobs) != n or len(versions) != n:
            raise RuntimeError("the engine returned per-token records that do not line up")
        self.tokens += ids
        self.sampled += [True] * n
        self.logprobs += logprobs
        self.versions += versions
        if routing is not None:
            if self.routing is None:
                self.routing = []
            self.routing += routing

    @property
    def routed_prefix(self) -> int:
        """How many leading tokens have routing (the trailing tool output may not)."""
        return len(self.routing or [])

    def prefix(self, n: int) -> Trajectory:
        """The first `n` tokens (a segment cut where its routing ends), same labels, as a
        new trajectory (checked like any other)."""
        return replace(
            self,
            tokens=self.tokens[:n],
            sampled=self.sampled[:n],
            logprobs=self.logprobs[:n],
            versions=self.versions[:n],
            routing=None if self.routing is None else self.routing[:n],
            metadata=dict(self.metadata),
        )

    @property
    def sampled_versions(self) -> list[int]:
        return [v for s, v in zip(self.sampled, self.versions, strict=True) if s]

    @property
    def num_sampled(self) -> int:
        return sum(self.sampled)


class FinishedGroup(BaseModel):
    """A finished group as persisted: its trajectories (one or more per episode), each
    with its reward and advantage; the file is these fields as JSON, validated on read."""

    group_id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    prompt_id: int | str
    episodes: list[Trajectory]

    @field_validator("episodes", mode="before")
    @classmethod
    def _every_field_known_and_tokens_given(cls, episodes: Any) -> Any:
        """Every field of a `Trajectory` has a default, so a record of another shape (an
        older file's prompt / completion split) would otherwise load as empty trajectories
        and be trained on as nothing."""
        known = {f.name for f in fields(Trajectory)}
        for i, item in enumerate(episodes if isinstance(episodes, list) else []):
            if not isinstance(item, dict):
                continue
            unknown = sorted(set(item) - known)
            if unknown or "tokens" not in item:
                raise ValueError(
                    f"episode {i} is not a trajectory: "
                    + (f"unknown fields {unknown}" if unknown else "it has no tokens")
                )
        return episodes


class GroupExists(FileExistsError):
    """The group was persisted before; groups are never regenerated or overwritten."""


class GroupFileError(ValueError):
    """A group file that does not hold a group of this format: damaged, or written before
    groups were stored as whole trajectories (an older run directory cannot be resumed)."""


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
        path = self._path(group_id)
        try:
            return FinishedGroup.model_validate_json(path.read_text())
        except (ValidationError, ValueError) as error:
            first = str(error).splitlines()[0]
            raise GroupFileError(
                f"{path} is not a finished group of this format ({first}): it is damaged or "
                "was written by an older composer-infra; resume from a run directory this "
                "version wrote, or start a new one"
            ) from None

    def ids(self) -> list[str]:
        return sorted(p.stem for p in self.root.glob("*.json") if not p.name.startswith("."))

    def pending(self, consumed: set[str]) -> list[FinishedGroup]:
        """Persisted groups that no checkpointed step has trained on yet."""
        return [self.get(g) for g in self.ids() if g not in consumed]
