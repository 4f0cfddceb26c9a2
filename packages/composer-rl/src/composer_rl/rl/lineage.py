"""Which weights a policy version names across trainer restarts: the version tree.

A version number names one set of weights, never two: a trainer restarted from the
checkpoint of step s (or from the initial weights, before any checkpoint) publishes the
restored weights under the next number the store has not used
(`TrainingService._skip_used_versions`). From then on version numbers stop counting
optimizer steps, and the versions its previous life published after step s name weights
the current policy does not descend from (a lost lineage). "Trainer version minus token
version" is then no measure of staleness: the tester's kill after step 4 of a run without
a checkpoint yet restarted at the initial weights as version 5, and the loop dropped as
stale the groups sampled by version 0 (the very weights it was training again) as well as
those of the lost versions 1-4.

The tree records every life of the trainer: a run of consecutive versions, one optimizer
step apart, whose first version republishes the weights of the version it restored. The
distance between two versions is the number of optimizer steps on the path between their
weights: for an ancestor of the current policy the steps since it (the old rule when no
restart happened), for a version of a lost lineage the steps from it back to where its
lineage forked plus the steps from the fork to the current policy (each an update one side
has and the other has not). The loop's staleness bound (`loop.max_off_policy_steps`)
applies to that distance.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer_infra.checkpoint import atomic_write_bytes

LINEAGE_FILE = "lineage.json"
"""The version tree's file, beside the trainer's step checkpoints (`checkpoints/`)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Life:
    """One life of the trainer: versions `first_version`, `first_version` + 1, ... are the
    weights after optimizer steps `first_step`, `first_step` + 1, ...; `first_version`
    republishes the weights of `restored_version` (None: a root, the initial weights or a
    restore the tree cannot place)."""

    first_version: int
    first_step: int
    restored_version: int | None


ROOT = Life(first_version=0, first_step=0, restored_version=None)


class VersionTree:
    """Every life of the trainer, oldest first; a life owns the versions up to the next one's
    first version (the last life: every version from its first on)."""

    def __init__(self, lives: Sequence[Life] = (ROOT,)) -> None:
        if not lives or lives[0].first_version != 0:
            raise ValueError("a version tree starts with a life at version 0")
        firsts = [life.first_version for life in lives]
        if firsts != sorted(set(firsts)):
            raise ValueError(f"lives must start at increasing versions, got {firsts}")
        self.lives: tuple[Life, ...] = tuple(lives)

    @property
    def life(self) -> int:
        """The index of the current (last) life: 0 until the trainer first restarts."""
        return len(self.lives) - 1

    def life_of(self, version: int) -> int:
        """The index of the life that published `version`."""
        if version < 0:
            raise ValueError(f"version {version} names no weights")
        return max(i for i, life in enumerate(self.lives) if life.first_version <= version)

    def step_of(self, version: int) -> int:
        """The optimizer steps behind the weights of `version`."""
        life = self.lives[self.life_of(version)]
        return life.first_step + version - life.first_version

    def _chain(self, version: int) -> dict[int, int]:
        """Life index -> the newest version of that life on the path from `version` back to
        its root (the versions `version`'s weights descend from)."""
        chain: dict[int, int] = {}
        current: int | None = version
        while current is not None:
            index = self.life_of(current)
            chain[index] = current
            current = self.lives[index].restored_version
        return chain

    def distance(self, version: int, to: int) -> int | None:
        """Optimizer steps on the path between the weights of `version` and of `to`; None
        when they share no root (a restore the tree could not place)."""
        a, b = self._chain(version), self._chain(to)
        common = [i for i in a if i in b]
        if not common:
            return None
        fork = min(a[max(common)], b[max(common)])
        return self.step_of(version) + self.step_of(to) - 2 * self.step_of(fork)

    def lag(self, version: int, trainer: int) -> int | None:
        """How stale a token sampled by `version` is for a trainer holding `trainer`: the
        `distance`, except that a version descending from the trainer's weights (published
        before the loop heard of the step) is ahead, negative. On a tree of one life,
        `trainer - version`: the rule before restarts were told apart."""
        if self.is_ancestor(trainer, of=version):
            return self.step_of(trainer) - self.step_of(version)
        return self.distance(version, trainer)

    def is_ancestor(self, version: int, of: int) -> bool:
        """Whether the weights of `of` descend from those of `version` (or are them)."""
        index = self.life_of(version)
        newest = self._chain(of).get(index)
        return newest is not None and version <= newest

    def restart(self, first_version: int, restored_step: int, restored_version: int) -> VersionTree:
        """The tree after a trainer life that publishes the weights of `restored_version`
        (after `restored_step` optimizer steps) as `first_version`.

        Recorded lives that start at `first_version` or later published nothing the store
        shows (the number is free again), so no token names them: they are forgotten."""
        kept = [life for life in self.lives if life.first_version < first_version]
        tree = VersionTree(kept)
        parent: int | None = restored_version
        if restored_version >= first_version or tree.step_of(restored_version) != restored_step:
            log.warning(
                "the version tree cannot place the restored weights (version %d, step %d); "
                "versions before %d count as a lineage of unknown distance",
                restored_version,
                restored_step,
                first_version,
            )
            parent = None
        return VersionTree([*kept, Life(first_version, restored_step, parent)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "lives": [
                {
                    "first_version": life.first_version,
                    "first_step": life.first_step,
                    "restored_version": life.restored_version,
                }
                for life in self.lives
            ]
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VersionTree:
        return cls([Life(**life) for life in data["lives"]])

    @classmethod
    def load(cls, path: Path) -> VersionTree:
        """The tree saved at `path`; a run without one (never restarted, or older than the
        file) has had one life so far."""
        if not path.is_file():
            return cls()
        return cls.from_dict(json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        atomic_write_bytes(path, json.dumps(self.to_dict(), indent=1).encode())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VersionTree) and self.lives == other.lives

    def __repr__(self) -> str:
        return f"VersionTree({list(self.lives)!r})"


def final_lineage(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step rows of metrics.jsonl that the final policy descends from.

    A restart appends a ``{"kind": "restart", "from_step": N}`` record, and the steps its
    killed predecessor logged after step N (trained, then lost with their weights) are
    logged again by the resumed run; they are left out here, as are the records
    themselves. Rows without a ``kind`` are steps (files older than the records)."""
    kept: list[dict[str, Any]] = []
    for row in rows:
        if row.get("kind") == RESTART:
            kept = [r for r in kept if int(r["step"]) <= int(row["from_step"])]
        elif row.get("kind", STEP) == STEP and "step" in row:
            kept.append(row)
    return kept


def restarts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The restart records of metrics.jsonl, in order."""
    return [row for row in rows if row.get("kind") == RESTART]


STEP = "step"
RESTART = "restart"
"""The `kind` of a metrics.jsonl line: an optimizer step, or a restart of the run."""


__all__ = [
    "LINEAGE_FILE",
    "RESTART",
    "STEP",
    "Life",
    "VersionTree",
    "final_lineage",
    "restarts",
]
