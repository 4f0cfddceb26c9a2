"""The task mix: category weights for the RL sampler, and the mix a run actually drew.

The report trains on a distribution that mirrors real use, feature iteration the largest
share. `TaskMix` holds that distribution as typed configuration (it validates like the rest
of the run config, with errors that say what to change), groups tasks by category, and
draws tasks by weight with a caller-owned RNG so that the sampler's position can be
checkpointed. `realised_mix` turns the tasks drawn so far back into shares, for the log.

    mix = TaskMix()                                   # the default weights below
    mix = TaskMix(weights={"feature_iteration": 3, "debugging": 1})   # only these two
    pools = mix.training_tasks()                      # {Category: [Task, ...]} (train split)
    rng = random.Random(seed)
    task = mix.draw(rng, pools)                       # category by weight, task uniformly
    metrics = mix_metrics(drawn)                      # {"mix/feature_iteration": 0.26, ...}
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from composer_rl.tasks.model import Category, Split, Task, TaskSource

if TYPE_CHECKING:
    import pluggy

DEFAULT_WEIGHTS: dict[Category, float] = {
    Category.FEATURE_ITERATION: 0.25,
    Category.DEBUGGING: 0.15,
    Category.NEW_FEATURE: 0.12,
    Category.REFACTOR: 0.10,
    Category.UNDERSTANDING: 0.08,
    Category.DOCUMENTATION: 0.06,
    Category.TESTING: 0.06,
    Category.CODE_REVIEW: 0.06,
    Category.OPTIMISATION: 0.04,
    Category.DEVOPS: 0.04,
    Category.MIGRATION: 0.04,
}
"""The report's order of shares, feature iteration the largest; the numbers are ours (the
report gives the order, not the shares). They sum to 1."""


class TaskMix(BaseModel):
    """Category weights (relative; they need not sum to 1). A category left out of
    `weights` gets weight 0: giving weights replaces the defaults, it does not patch them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: dict[Category, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    @field_validator("weights")
    @classmethod
    def _check(cls, value: dict[Category, float]) -> dict[Category, float]:
        bad = {c.value: w for c, w in value.items() if not math.isfinite(w) or w < 0}
        if bad:
            raise ValueError(f"mix weights must be finite and >= 0; got {bad}")
        if not any(w > 0 for w in value.values()):
            raise ValueError(
                "mix weights are all zero: give at least one category a positive weight "
                f"(categories: {', '.join(c.value for c in Category)})"
            )
        return value

    def shares(self) -> dict[Category, float]:
        """The weights normalised to sum to 1 (categories of weight 0 left out)."""
        total = sum(self.weights.values())
        return {c: w / total for c, w in self.weights.items() if w > 0}

    def by_category(self, tasks: Iterable[Task]) -> dict[Category, list[Task]]:
        """`tasks` grouped by category (each list sorted by id, so the grouping is the same
        whatever order the sources yield them in); only categories the mix draws from."""
        groups: dict[Category, list[Task]] = defaultdict(list)
        for task in tasks:
            if self.weights.get(task.category, 0) > 0:
                groups[task.category].append(task)
        return {c: sorted(groups[c], key=lambda t: t.id) for c in Category if c in groups}

    def training_tasks(
        self,
        sources: Sequence[TaskSource] | None = None,
        pm: pluggy.PluginManager | None = None,
    ) -> dict[Category, list[Task]]:
        """The training split of `sources` (default: the built-ins) and plugin sources, by
        category. Raises when a category with weight > 0 has no training task."""
        from composer_rl.tasks.sources import collect_tasks

        pools = self.by_category(collect_tasks(Split.TRAIN, sources=sources, pm=pm))
        self.check(pools)
        return pools

    def check(self, pools: Mapping[Category, Sequence[Task]]) -> None:
        """Every category with weight > 0 must have tasks to draw."""
        empty = [c.value for c, w in self.weights.items() if w > 0 and not pools.get(c)]
        if empty:
            raise ValueError(
                f"the mix gives weight to {empty} but there are no tasks of "
                f"{'that category' if len(empty) == 1 else 'those categories'}: add tasks "
                "or set their weight to 0"
            )

    def draw_category(
        self,
        rng: random.Random,
        pools: Mapping[Category, Sequence[Task]],
        scale: Mapping[Category, float] | None = None,
    ) -> Category:
        """A category with probability proportional to its weight, among those in `pools`
        that have tasks; `scale` multiplies the weights (the RL sampler's learnability: a
        category whose tasks teach nothing is drawn less, not only its templates)."""
        factor = scale or {}
        choices = [
            (c, w * factor.get(c, 1.0)) for c, w in self.weights.items() if w > 0 and pools.get(c)
        ]
        if not choices:
            raise ValueError("no category with weight > 0 has tasks to draw")
        categories, weights = zip(*choices, strict=True)
        return rng.choices(categories, weights=weights)[0]

    def draw(self, rng: random.Random, pools: Mapping[Category, Sequence[Task]]) -> Task:
        """One task: a category by weight, then a task of it uniformly."""
        return rng.choice(pools[self.draw_category(rng, pools)])

    def draw_many(
        self, rng: random.Random, pools: Mapping[Category, Sequence[Task]], n: int
    ) -> list[Task]:
        return [self.draw(rng, pools) for _ in range(n)]


def realised_mix(tasks: Iterable[Task]) -> dict[str, float]:
    """The share of each category among `tasks` (every category, 0 where none was drawn)."""
    counts = Counter(t.category for t in tasks)
    total = sum(counts.values())
    return {c.value: (counts[c] / total if total else 0.0) for c in Category}


def mix_metrics(tasks: Iterable[Task], prefix: str = "mix/") -> dict[str, float]:
    """`realised_mix` as metric names for `metrics.jsonl`."""
    return {f"{prefix}{name}": share for name, share in realised_mix(tasks).items()}
