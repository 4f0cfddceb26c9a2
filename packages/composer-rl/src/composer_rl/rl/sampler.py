"""Which prompt comes next: a single epoch over the task mix, with hard-item upsampling.

Each draw picks a category by the mix's weights (`composer_rl.tasks.TaskMix`: feature
iteration the largest share by default), then the next task of that category in a seeded
order. Single epoch is a promise across kills and resumes: the tasks already handed out are
the sampler's state, saved (atomically) on every draw, so a resumed run never draws a prompt
twice, and each draw's randomness is a function of (seed, draw number) only. Later in a run
the report upsamples harder items; here "harder" is learned from earlier attempts of the
same kind of task (category and difficulty): the turns and generated tokens their episodes
took. A task is still never drawn twice; upsampling only changes which remaining one comes.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from composer_infra.checkpoint import atomic_write_bytes
from composer_rl.tasks.mix import TaskMix, mix_metrics
from composer_rl.tasks.model import Category, Task


class UpsamplingConfig(BaseModel):
    """Favouring hard kinds of task later in a run (`composer-rl rl`'s
    ``loop.upsample_hard_after``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_fraction: float = Field(
        default=0.5, ge=0, le=1, description="start favouring hard kinds after this share"
    )
    strength: float = Field(
        default=1.0, ge=0, description="weight = 1 + strength x (normalised difficulty)"
    )
    planned_draws: int | None = Field(
        default=None,
        ge=1,
        description="the draws the run plans (an RL run: steps x groups a step); none: the "
        "whole epoch. A run draws a few hundred of thousands of tasks, so a share of the "
        "epoch would start upsampling long after the run ended (it did, before this field)",
    )


class LearnabilityConfig(BaseModel):
    """Weighting draws by how much a template's groups can teach (`composer-rl rl`'s
    ``loop.learnability``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prior: float = Field(
        default=1.0,
        gt=0,
        description="pseudo-episodes solved and failed that every template starts with",
    )
    floor: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="the least weight a template gets (never starved: p can change)",
    )


def learnability_key(task: Task) -> str:
    """What solve rates are pooled over: the template (a category and difficulty otherwise)."""
    template = task.metadata.get("template")
    return str(template) if template else task_kind(task)


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
        mix: TaskMix | None = None,
        learnability: LearnabilityConfig | None = None,
    ) -> None:
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique for a single-epoch sampler")
        self.tasks = {t.id: t for t in tasks}
        self.order = sorted(ids)
        random.Random(seed).shuffle(self.order)
        self.mix = mix or TaskMix()
        self.pools: dict[Category, list[str]] = defaultdict(list)
        for task_id in self.order:
            self.pools[self.tasks[task_id].category].append(task_id)
        if not any(self.mix.weights.get(c, 0) > 0 for c in self.pools):
            raise ValueError(
                "the task mix gives weight 0 to every category these tasks have "
                f"({sorted(c.value for c in self.pools)}); change the mix or the tasks"
            )
        self.seed = seed
        self.upsampling = upsampling
        self.state_path = state_path
        self.drawn: list[str] = []
        self._drawn_set: set[str] = set()
        self._effort: dict[str, list[float]] = defaultdict(list)
        self.learnability = learnability
        self.outcomes: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # key: [solved, seen]
        if state_path is not None and state_path.exists():
            self._load(state_path)

    @property
    def remaining(self) -> int:
        return len(self.order) - len(self.drawn)

    def _remaining_pools(self) -> dict[Category, list[Task]]:
        return {
            category: [self.tasks[t] for t in ids if t not in self._drawn_set][:64]
            for category, ids in self.pools.items()
        }

    @property
    def exhausted(self) -> bool:
        """No task left in any category the mix draws from (weight 0 ones are never drawn)."""
        return not any(
            self.mix.weights.get(c, 0) > 0 and any(t not in self._drawn_set for t in ids)
            for c, ids in self.pools.items()
        )

    def realised_mix(self) -> dict[str, float]:
        """Share of each category among the tasks drawn so far (`mix/<category>` metrics)."""
        return mix_metrics(self.tasks[t] for t in self.drawn)

    def record_effort(self, task: Task, turns: float, tokens: float) -> None:
        """What an attempt at `task` took (more turns and tokens: harder)."""
        self._effort[task_kind(task)].append(turns + tokens / 100.0)

    def record_outcome(self, task: Task, solved: bool) -> None:
        """A finished episode of `task`: whether it solved the task (learnability's input)."""
        counts = self.outcomes[learnability_key(task)]
        counts[0] += int(solved)
        counts[1] += 1

    def learnability_weight(self, task: Task) -> float:
        """4 p (1 - p) of the template's smoothed solve rate, at least the floor (1 at p = 1/2)."""
        config = self.learnability
        if config is None:
            return 1.0
        solved, seen = self.outcomes.get(learnability_key(task), (0, 0))
        p = (solved + config.prior) / (seen + 2 * config.prior)
        return max(config.floor, 4.0 * p * (1.0 - p))

    def _category_learnability(
        self, pools: Mapping[Category, Sequence[Task]]
    ) -> dict[Category, float] | None:
        """Each category's mean learnability over the tasks it could draw next.

        Without it the mix alone picks the category and learnability only weighs templates
        inside it: in rl-t05 (docs/rl/2026-12-06-rl-t05.md) 832 of 2,248 episodes went to six
        categories none of whose templates ever solved. With it a task's chance is its
        category's mix weight times its own learnability, over the size of the category's
        window (the tasks `next` chooses among)."""
        if self.learnability is None:
            return None
        return {
            category: sum(self.learnability_weight(t) for t in tasks) / len(tasks)
            for category, tasks in pools.items()
            if tasks
        }

    def _weights(self, candidates: list[str]) -> list[float] | None:
        hard = self._hard_weights(candidates)
        if self.learnability is None:
            return hard
        learn = [self.learnability_weight(self.tasks[c]) for c in candidates]
        return learn if hard is None else [a * b for a, b in zip(hard, learn, strict=True)]

    def _hard_weights(self, candidates: list[str]) -> list[float] | None:
        up = self.upsampling
        if up is None or not self._effort:
            return None
        planned = up.planned_draws if up.planned_draws is not None else len(self.order)
        if len(self.drawn) < up.after_fraction * planned:
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
        rng = random.Random(f"{self.seed}:{len(self.drawn)}")
        pools = self._remaining_pools()
        category = self.mix.draw_category(rng, pools, self._category_learnability(pools))
        window = [t.id for t in pools[category]]
        weights = self._weights(window)
        chosen = window[0] if weights is None else rng.choices(window, weights=weights, k=1)[0]
        self.drawn.append(chosen)
        self._drawn_set.add(chosen)
        self._save()
        return self.tasks[chosen]

    def _save(self) -> None:
        if self.state_path is None:
            return
        state = {
            "seed": self.seed,
            "num_tasks": len(self.order),
            "drawn": self.drawn,
            "outcomes": dict(self.outcomes),
        }
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
        for key, (solved, seen) in state.get("outcomes", {}).items():
            self.outcomes[key] = [int(solved), int(seen)]


__all__ = [
    "LearnabilityConfig",
    "TaskSampler",
    "UpsamplingConfig",
    "learnability_key",
    "task_kind",
]
