"""Which prompt comes next: a single epoch over the training tasks, with hard-item upsampling.

Single epoch is a promise across kills and resumes: the set of tasks already handed out is
the sampler's state, saved (atomically) every time it changes, so a resumed run never draws
a prompt twice. Later in a run the report upsamples harder items; here "harder" is learned
from earlier attempts of the same kind of task (category and difficulty): the turns and
generated tokens their episodes took. A task is still never drawn twice; upsampling only
changes the order in which the remaining ones come.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from composer_infra.checkpoint import atomic_write_bytes
from composer_rl.tasks.model import Task


@dataclass(frozen=True)
class UpsamplingConfig:
    after_fraction: float = 0.5  # start favouring hard kinds after this share of the epoch
    strength: float = 1.0  # weight = 1 + strength * (normalised difficulty of the kind)


def task_kind(task: Task) -> str:
    return f"{task.category.value}/d{task.difficulty}"


class TaskSampler:
    """Hands out each task at most once; state = seed + the ids already drawn."""

    def __init__(
        self,
        tasks: Sequence[Task],
        seed: int = 0,
        upsampling: UpsamplingConfig | None = None,
        state_path: Path | None = None,
    ) -> None:
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique for a single-epoch sampler")
        self.tasks = {t.id: t for t in tasks}
        self.order = sorted(ids)
        random.Random(seed).shuffle(self.order)
        self.seed = seed
        self.upsampling = upsampling
        self.state_path = state_path
        self.drawn: list[str] = []
        self._drawn_set: set[str] = set()
        self._effort: dict[str, list[float]] = defaultdict(list)
        if state_path is not None and state_path.exists():
            self._load(state_path)

    @property
    def remaining(self) -> int:
        return len(self.order) - len(self.drawn)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    def record_effort(self, task: Task, turns: float, tokens: float) -> None:
        """What an attempt at `task` took (more turns and tokens: harder)."""
        self._effort[task_kind(task)].append(turns + tokens / 100.0)

    def _weights(self, candidates: list[str]) -> list[float] | None:
        up = self.upsampling
        if up is None or len(self.drawn) < up.after_fraction * len(self.order) or not self._effort:
            return None
        means = {k: sum(v) / len(v) for k, v in self._effort.items() if v}
        low, high = min(means.values()), max(means.values())
        span = (high - low) or 1.0
        return [
            1.0 + up.strength * (means.get(task_kind(self.tasks[c]), low) - low) / span
            for c in candidates
        ]

    def next(self) -> Task | None:
        """The next task, or None when the epoch is over."""
        if self.exhausted:
            return None
        window = [t for t in self.order if t not in self._drawn_set][:64]
        weights = self._weights(window)
        if weights is None:
            chosen = window[0]
        else:
            rng = random.Random(f"{self.seed}:{len(self.drawn)}")
            chosen = rng.choices(window, weights=weights, k=1)[0]
        self.drawn.append(chosen)
        self._drawn_set.add(chosen)
        self._save()
        return self.tasks[chosen]

    def _save(self) -> None:
        if self.state_path is None:
            return
        state = {"seed": self.seed, "num_tasks": len(self.order), "drawn": self.drawn}
        atomic_write_bytes(self.state_path, json.dumps(state).encode())

    def _load(self, path: Path) -> None:
        state = json.loads(path.read_text())
        if state.get("seed") != self.seed or state.get("num_tasks") != len(self.order):
            raise ValueError(
                f"{path} was written for {state.get('num_tasks')} tasks with seed "
                f"{state.get('seed')}; this run has {len(self.order)} tasks and seed {self.seed}. "
                "Resume with the same task set and seed, or use a new run directory."
            )
        unknown = [t for t in state["drawn"] if t not in self.tasks]
        if unknown:
            raise ValueError(f"{path} names tasks this run does not have: {unknown[:5]}")
        self.drawn = list(state["drawn"])
        self._drawn_set = set(self.drawn)


__all__ = ["TaskSampler", "UpsamplingConfig", "task_kind"]
