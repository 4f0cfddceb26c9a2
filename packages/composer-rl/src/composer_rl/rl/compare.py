"""Did RL help? The final policy against the SFT policy on the same held-out tasks, with noise.

Both checkpoints run the same held-out tasks (greedy for pass@1; sampled for pass@k when
asked). Every rate comes with its standard error over tasks, and the RL-minus-SFT margin
with the standard error of the paired difference (the same task under both policies), which
is far tighter than two independent errors because task difficulty cancels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer_rl.agent.episode import EpisodeResult, RunnerConfig
from composer_rl.eval import EvalConfig, pass_at_k, run_eval
from composer_rl.eval.stats import mean_se
from composer_rl.tasks import Split, collect_tasks, sample_tasks
from composer_rl.tasks.model import Task


@dataclass
class PolicyScores:
    name: str
    checkpoint: str
    per_task_pass1: dict[str, float]
    per_task_passk: dict[str, float] = field(default_factory=dict)
    per_task_sampled_pass1: dict[str, float] = field(default_factory=dict)
    """pass@1 of each task from the same temperature-1 samples as pass@k (their solve rate):
    the policy RL trains, and a lower-variance estimate than one greedy episode."""
    k: int = 0
    reward_mean: float = math.nan
    components: dict[str, float] = field(default_factory=dict)
    tokens_per_episode: float = math.nan
    by_difficulty: dict[int, tuple[float, float, int]] = field(default_factory=dict)

    def pass1(self) -> tuple[float, float]:
        return mean_se(list(self.per_task_pass1.values()))

    def passk(self) -> tuple[float, float]:
        return mean_se(list(self.per_task_passk.values()))

    def sampled_pass1(self) -> tuple[float, float]:
        return mean_se(list(self.per_task_sampled_pass1.values()))

    def to_json(self) -> dict[str, Any]:
        return {**vars(self), "by_difficulty": {str(k): v for k, v in self.by_difficulty.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicyScores:
        by_difficulty = {int(k): tuple(v) for k, v in data.pop("by_difficulty", {}).items()}
        return cls(**data, by_difficulty=by_difficulty)  # type: ignore[arg-type]


def heldout_tasks(per_template: int, seed: int = 0) -> list[Task]:
    tasks = collect_tasks(Split.HELDOUT)
    return sample_tasks(tasks, per_template, seed=seed) if per_template else tasks


def _per_task(results: list[EpisodeResult], k: int) -> dict[str, float]:
    by_task: dict[str, list[bool]] = {}
    for r in results:
        by_task.setdefault(r.task.id, []).append(r.solved)
    return {t: pass_at_k(len(v), sum(v), min(k, len(v))) for t, v in by_task.items()}


def score_policy(
    name: str,
    checkpoint: Path,
    tasks: list[Task],
    *,
    runner: RunnerConfig,
    samples_for_k: int = 0,
    threads: int | None = None,
) -> PolicyScores:
    greedy = RunnerConfig(**{**vars(runner), "temperature": 0.0})
    summary, results = run_eval(checkpoint, tasks, EvalConfig(samples=1, runner=greedy), threads)
    scores = PolicyScores(
        name=name,
        checkpoint=str(checkpoint),
        per_task_pass1=_per_task(results, 1),
        reward_mean=float(summary["reward_total_mean"]),
        components=dict(summary["reward_components_mean"]),
        tokens_per_episode=float(summary["tokens_per_episode"]),
    )
    for difficulty in sorted({t.difficulty for t in tasks}):
        values = [scores.per_task_pass1[t.id] for t in tasks if t.difficulty == difficulty]
        mean, se = mean_se(values)
        scores.by_difficulty[difficulty] = (mean, se, len(values))
    if samples_for_k > 1:
        sampled = RunnerConfig(**{**vars(runner), "temperature": 1.0})
        config = EvalConfig(samples=samples_for_k, k_values=(samples_for_k,), runner=sampled)
        _, sampled_results = run_eval(checkpoint, tasks, config, threads)
        scores.per_task_passk = _per_task(sampled_results, samples_for_k)
        scores.per_task_sampled_pass1 = _per_task(sampled_results, 1)
        scores.k = samples_for_k
    return scores


def paired_margin(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    """Mean of b - a over the tasks both scored, and its standard error."""
    common = sorted(set(a) & set(b))
    mean, se = mean_se([b[t] - a[t] for t in common])
    return mean, se, len(common)


def comparison_rows(base: PolicyScores, final: PolicyScores) -> list[dict[str, Any]]:
    """The table `composer-rl rl` prints: each metric for both policies and the margin."""
    rows = []
    b1, f1 = base.pass1(), final.pass1()
    m1 = paired_margin(base.per_task_pass1, final.per_task_pass1)
    rows.append({"metric": "pass@1", "sft": b1, "rl": f1, "margin": m1[:2], "tasks": m1[2]})
    if base.k and final.k:
        ms = paired_margin(base.per_task_sampled_pass1, final.per_task_sampled_pass1)
        rows.append(
            {
                "metric": f"pass@1 (T=1, {final.k} samples)",
                "sft": base.sampled_pass1(),
                "rl": final.sampled_pass1(),
                "margin": ms[:2],
                "tasks": ms[2],
            }
        )
        mk = paired_margin(base.per_task_passk, final.per_task_passk)
        rows.append(
            {
                "metric": f"pass@{final.k}",
                "sft": base.passk(),
                "rl": final.passk(),
                "margin": mk[:2],
                "tasks": mk[2],
            }
        )
    for difficulty, (mean, se, n) in sorted(final.by_difficulty.items()):
        bm, bse, _ = base.by_difficulty.get(difficulty, (math.nan, math.nan, 0))
        rows.append(
            {
                "metric": f"pass@1 difficulty {difficulty}",
                "sft": (bm, bse),
                "rl": (mean, se),
                "margin": (mean - bm, math.nan),
                "tasks": n,
            }
        )
    return rows


__all__ = [
    "PolicyScores",
    "comparison_rows",
    "heldout_tasks",
    "paired_margin",
    "score_policy",
]
