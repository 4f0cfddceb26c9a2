"""A score's lift over the baselines: score − max(baselines), paired over tasks.

When a baseline earns something on an eval (finishing at once passes a task whose tests
already pass), the score alone overstates what the policy did; the lift over the better
baseline is what the policy added. It is paired by task (the policy's value on a task minus
the baseline's on the same task), so task difficulty cancels, and its standard error is that
of the mean paired difference (`composer_rl.eval.stats.mean_se`). "The better baseline" is
the one with the higher mean over the tasks both were scored on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from composer_rl.eval.stats import format_se, mean_se


@dataclass(frozen=True)
class Lift:
    """Mean over tasks of policy − `baseline`, its standard error and the paired tasks."""

    mean: float
    se: float
    baseline: str
    tasks: int

    def text(self, digits: int = 3) -> str:
        return format_se(self.mean, self.se, digits, sign=True)


def lift_over_baselines(
    policy: Mapping[str, float], baselines: Mapping[str, Mapping[str, float]]
) -> Lift | None:
    """The policy's per-task values against the best of `baselines` (name: per-task values),
    paired over the tasks they share; None when no baseline shares a task with the policy."""
    best: tuple[float, str, list[str]] | None = None
    for name, values in baselines.items():
        common = sorted(set(policy) & set(values))
        if not common:
            continue
        mean = sum(values[t] for t in common) / len(common)
        if best is None or mean > best[0]:
            best = (mean, name, common)
    if best is None:
        return None
    _, name, common = best
    mean, se = mean_se(policy[t] - baselines[name][t] for t in common)
    return Lift(mean, se if len(common) > 1 else math.nan, name, len(common))


__all__ = ["Lift", "lift_over_baselines"]
