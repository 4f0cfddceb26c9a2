"""Baseline scores for any comparison of policies: do-nothing and random, on the same tasks.

`baseline_scores` scores the baselines of `composer_rl.eval.baseline_checkpoints` with
`composer_rl.eval.scores.score_policy`, exactly as a trained checkpoint is scored (greedy
pass@1, and with `samples_for_k` temperature-1 samples for pass@k), so a learning margin
can be read against what a policy that does nothing useful earns on those tasks:

    sft = score_policy("sft", model, tasks, runner=runner)
    base = baseline_scores(tasks, runner, like=model)
    lift = lift_over_baselines(sft.per_task_pass1,
                               {n: b.per_task_pass1 for n, b in base.items()})

The random baseline is a randomly initialised checkpoint of the reference's own preset and
sizes (not a uniform random tool-call policy): it goes through the real inference engine,
and at the tiny scale it almost never writes a well-formed call, so it mostly tests that
garbage output earns nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from composer_rl.agent.episode import RunnerConfig
from composer_rl.eval.baseline_checkpoints import (
    BASELINES,
    CONFIG_FILE,
    BaselineName,
    baseline_checkpoint,
)
from composer_rl.eval.lift import Lift, lift_over_baselines
from composer_rl.eval.scores import PolicyScores, score_policy
from composer_rl.plugins import JobPlugins
from composer_rl.tasks.model import Task


def baseline_scores(
    tasks: list[Task],
    runner: RunnerConfig,
    which: Sequence[BaselineName] = BASELINES,
    *,
    like: Path | None = None,
    samples_for_k: int = 0,
    k_tasks: list[Task] | None = None,
    threads: int | None = None,
    batch: int = 32,
    seed: int = 0,
    plugins: JobPlugins | None = None,
) -> dict[str, PolicyScores]:
    """{baseline name: its `PolicyScores`} on `tasks`, scored by `score_policy` with the same
    arguments a real checkpoint gets (`runner`, `samples_for_k`, `k_tasks`, `batch`).

    `like` is the checkpoint being compared: the baselines take its tokenizer (so token
    counts compare) and the random one its architecture; without it, a random two-layer tiny
    checkpoint stands in for both. `seed` initialises the random weights. Every rate comes
    with its standard error over tasks (`PolicyScores.pass1()` and the rest). `plugins`: the
    job's (rewards, monitors, sandbox backends), as `score_policy` takes them.
    """
    unknown = [name for name in which if name not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; known: {', '.join(BASELINES)}")
    out: dict[str, PolicyScores] = {}
    with tempfile.TemporaryDirectory(prefix="baselines-") as tmp:
        for name in which:
            has_model = like is not None and (Path(like) / CONFIG_FILE).is_file()
            reference = like if name == "do_nothing" or has_model else None
            checkpoint = baseline_checkpoint(name, Path(tmp), like=reference, seed=seed)
            scores = score_policy(
                name,
                checkpoint,
                tasks,
                runner=runner,
                samples_for_k=samples_for_k,
                k_tasks=k_tasks,
                threads=threads,
                batch=batch,
                plugins=plugins,
            )
            # The temporary directory is gone after this call; say what the policy was.
            scores.checkpoint = f"{name} baseline (tokenizer of {like or 'a random tiny model'})"
            out[name] = scores
    return out


def pass1_lift(policy: PolicyScores, baselines: dict[str, PolicyScores]) -> Lift | None:
    """Greedy pass@1 of `policy` minus the better baseline's, paired over tasks."""
    return lift_over_baselines(
        policy.per_task_pass1, {name: b.per_task_pass1 for name, b in baselines.items()}
    )


__all__ = ["BASELINES", "Lift", "baseline_scores", "lift_over_baselines", "pass1_lift"]
