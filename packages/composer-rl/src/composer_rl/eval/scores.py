"""One checkpoint's scores on a task set: greedy pass@1, sampled pass@k, rewards, behaviours.

`score_policy` runs the checkpoint on the tasks through `run_eval` (greedy for pass@1;
temperature-1 samples for pass@k and the sampled pass@1 when asked) and returns
`PolicyScores`: every rate per task, so that two policies scored on the same tasks compare
paired (`composer_rl.rl.compare`), and the baselines (`composer_rl.eval.baselines`) are
scored exactly as a trained checkpoint is. Every rate comes with its standard error over
tasks (`composer_rl.eval.stats.mean_se`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer_model import ComposerTokenizer
from composer_rl.agent.episode import EpisodeResult, RunnerConfig, episode_view
from composer_rl.eval.behaviour import per_task_behaviours, tokens_per_solved
from composer_rl.eval.evaluate import EvalConfig, run_eval
from composer_rl.eval.passk import pass_at_k
from composer_rl.eval.stats import mean_se
from composer_rl.plugins import JobPlugins
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
    behaviours: dict[str, dict[str, float]] = field(default_factory=dict)
    """{behaviour: {task id: rate}} over every scored episode (`composer_rl.eval.behaviour`)."""
    behaviours_greedy: dict[str, dict[str, float]] = field(default_factory=dict)
    """The same over the greedy episodes only: the policy's choice where it could run the
    tests, which the demonstration mix must leave a real choice."""
    behaviours_sampled: dict[str, dict[str, float]] = field(default_factory=dict)
    """The same over the temperature-1 episodes only (the policy RL samples from)."""
    tokens_per_solved_d1: dict[str, float] = field(default_factory=dict)

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
    k_tasks: list[Task] | None = None,
    threads: int | None = None,
    batch: int = 32,
    plugins: JobPlugins | None = None,
) -> PolicyScores:
    """Greedy pass@1 on `tasks`; with `samples_for_k`, temperature-1 samples of `k_tasks`
    (default: the same tasks) for pass@k and the sampled pass@1. `plugins`: the job's, which
    score the episodes and give the sandbox backend (default: built once a `run_eval`).

    All episodes of a pass go to the engine at once (`tasks_per_step` = all), so continuous
    batching keeps `batch` episodes decoding instead of waiting for each chunk's slowest.
    """
    greedy = runner.model_copy(update={"temperature": 0.0})
    config = EvalConfig(
        samples=1,
        runner=greedy,
        max_batch_size=batch,
        tasks_per_step=max(1, len(tasks)),
        job=plugins,
    )
    summary, results = run_eval(checkpoint, tasks, config, threads)
    episodes = list(results)
    greedy_count = len(episodes)
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
        sampled_tasks = tasks if k_tasks is None else k_tasks
        sampled = runner.model_copy(update={"temperature": 1.0})
        config = EvalConfig(
            samples=samples_for_k,
            k_values=(samples_for_k,),
            runner=sampled,
            max_batch_size=batch,
            tasks_per_step=max(1, len(sampled_tasks)),
            job=plugins,
        )
        _, sampled_results = run_eval(checkpoint, sampled_tasks, config, threads)
        scores.per_task_passk = _per_task(sampled_results, samples_for_k)
        scores.per_task_sampled_pass1 = _per_task(sampled_results, 1)
        scores.k = samples_for_k
        episodes += sampled_results
    tokenizer = ComposerTokenizer.from_file(checkpoint / "tokenizer.json")
    views = [(r.task.id, episode_view(r, tokenizer), r.solved) for r in episodes]
    scores.behaviours = per_task_behaviours(views)
    scores.behaviours_greedy = per_task_behaviours(views[:greedy_count])
    if len(views) > greedy_count:
        scores.behaviours_sampled = per_task_behaviours(views[greedy_count:])
    scores.tokens_per_solved_d1 = tokens_per_solved(
        (r.task.id, r.task.difficulty, r.generated_tokens, r.solved) for r in episodes
    )
    return scores


__all__ = ["PolicyScores", "score_policy"]
