"""router-replay, second half: does replay change what a run learns?

The mismatch half shows replay removing most of the train/inference gap. Whether that gap
costs learning needs runs that learn, and single-epoch RL on held-out tasks does not learn
measurably on the tiny policy (issue 12). RL on a few training tasks seen again and again
does (`studies.fixed_tasks`, +0.13 solve rate in the composer-rl README), so the two runs
here train there, from the same checkpoint, seed and tasks, with replay on and off.

A mismatch needs different numbers on the two sides. On a GPU the engine decodes in bf16;
on this CPU bf16 matmuls are emulated (about 60x slower than float32 on the project's
2-core box), so the engines instead receive the trainer's weights rounded to bf16
(`train.publish_dtype = "bfloat16"`, what halving the sync's bytes does) and decode in
float32. The trainer keeps float32 weights: near ties in a router's top-k go different ways
on the two sides, the same kind of flip the mismatch half measures for a bf16 engine.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer_rl.eval.scores import score_policy
from composer_rl.rl.compare import paired_margin
from composer_rl.rl.config import load_config
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.studies.fixed_tasks import FixedTasks, training_curve
from composer_rl.studies.rl_runs import RLSizes, run_or_reuse


@dataclass(frozen=True)
class LearningSizes:
    fixed: FixedTasks
    group_size: int
    groups_per_step: int
    k: int  # temperature-1 samples a task when scoring

    @property
    def rl(self) -> RLSizes:
        steps = self.fixed.tasks * self.fixed.repeats // self.groups_per_step
        return RLSizes(
            steps=steps, group_size=self.group_size, groups_per_step=self.groups_per_step, lr=None
        )


LEARN_QUICK = LearningSizes(FixedTasks(tasks=2, repeats=2), group_size=2, groups_per_step=1, k=2)
LEARN_FULL = LearningSizes(FixedTasks(tasks=16, repeats=8), group_size=8, groups_per_step=4, k=8)

VARIANTS: tuple[tuple[str, bool], ...] = (("replay on", True), ("replay off", False))
PUBLISH_DTYPE = "bfloat16"
RUN_METRICS = ("logprob_mismatch", "is_capped_share", "replay_replacements")
RATES = ("greedy", "sampled")


def _margin(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """b - a paired over tasks: mean, s.e. and the number of tasks."""
    mean, se, tasks = paired_margin(a, b)
    return {"mean": mean, "se": se, "tasks": tasks}


def run_learning(
    model: Path, work: Path, sizes: LearningSizes, seed: int, quick: bool
) -> dict[str, Any]:
    """Train both variants on the same copied tasks, score the starting and both final
    policies on those tasks, and compare (paired by task)."""
    tasks, task_file = sizes.fixed.write(seed, work / "tasks.jsonl")
    base: dict[str, object] = {}
    if quick:
        base = {k: v for k, v in QUICK_RL_SETTINGS.items() if k != "tasks.per_template"}
    base |= {"tasks.source": str(task_file), "train.publish_dtype": PUBLISH_DTYPE}
    runner = load_config(None, {**base, "model": str(model)}).rollout

    def score(name: str, checkpoint: Path) -> dict[str, dict[str, float]]:
        scores = score_policy(name, checkpoint, tasks, runner=runner, samples_for_k=sizes.k)
        return {"greedy": scores.per_task_pass1, "sampled": scores.per_task_sampled_pass1}

    start = score("start", model)
    variants: dict[str, dict[str, Any]] = {}
    for name, replay in VARIANTS:
        run_dir = work / name.replace(" ", "-")
        history, reused = run_or_reuse(
            model, run_dir, sizes.rl, {**base, "loss.router_replay": replay}, seed
        )
        final = score(name, run_dir / "final")
        variants[name] = {
            "reused": reused,
            "steps": len(history),
            "per_task": final,
            "gain": {rate: _margin(start[rate], final[rate]) for rate in RATES},
            "curve": training_curve(run_dir),
            **{
                metric: statistics.fmean(float(row.get(metric, 0.0)) for row in history)
                for metric in RUN_METRICS
            },
        }
    on, off = (variants[name]["per_task"] for name, _ in VARIANTS)
    return {
        "tasks": [t.id for t in tasks],
        "repeats": sizes.fixed.repeats,
        "k": sizes.k,
        "sizes": {**sizes.rl.__dict__, "tasks": sizes.fixed.tasks},
        "publish_dtype": PUBLISH_DTYPE,
        "start": {rate: statistics.fmean(v.values()) for rate, v in start.items()},
        "variants": variants,
        "on_minus_off": {rate: _margin(off[rate], on[rate]) for rate in RATES},
    }


def learning_rows(result: dict[str, Any]) -> list[list[str]]:
    """One table row per variant: the run's mismatch metrics and what it learned."""
    rows = []
    for name, _ in VARIANTS:
        v = result["variants"][name]
        gain = v["gain"]
        rows.append(
            [
                name,
                f"{v['logprob_mismatch']:.2e}",
                f"{v['is_capped_share']:.2%}",
                f"{v['replay_replacements']:.1f}",
                " -> ".join(f"{m:.2f}" for m, _, _ in v["curve"]),
                f"{result['start']['sampled']:.3f} -> "
                f"{statistics.fmean(v['per_task']['sampled'].values()):.3f} "
                f"({gain['sampled']['mean']:+.3f} ± {gain['sampled']['se']:.3f})",
                f"{result['start']['greedy']:.3f} -> "
                f"{statistics.fmean(v['per_task']['greedy'].values()):.3f} "
                f"({gain['greedy']['mean']:+.3f} ± {gain['greedy']['se']:.3f})",
            ]
        )
    return rows


LEARNING_COLUMNS = [
    "learning run",
    "mean |log pi_train - log pi_behaviour| a step (lag included)",
    "IS weight capped",
    "guard replacements a step",
    "training solve rate by quarter",
    "solve rate at T=1 on the tasks (gain ± s.e.)",
    "greedy pass@1 (gain ± s.e.)",
]


def learning_summary(result: dict[str, Any]) -> str:
    diff = result["on_minus_off"]["sampled"]
    greedy = result["on_minus_off"]["greedy"]
    on, off = (result["variants"][name] for name, _ in VARIANTS)
    return (
        f"Learning, {result['sizes']['tasks']} training tasks each handed out "
        f"{result['repeats']} times, engines served {result['publish_dtype']}-rounded weights: "
        f"per-step mismatch {on['logprob_mismatch']:.2e} with replay against "
        f"{off['logprob_mismatch']:.2e} without; the T=1 solve rate on the tasks rose "
        f"{on['gain']['sampled']['mean']:+.3f} ± {on['gain']['sampled']['se']:.3f} with replay "
        f"and {off['gain']['sampled']['mean']:+.3f} ± {off['gain']['sampled']['se']:.3f} "
        f"without; replay on - off {diff['mean']:+.3f} ± {diff['se']:.3f} (greedy "
        f"{greedy['mean']:+.3f} ± {greedy['se']:.3f}), paired over {diff['tasks']} tasks. "
        + (
            "Within twice its standard error: no effect of replay on learning is "
            "measurable at this size."
            if abs(diff["mean"]) <= 2 * diff["se"]
            else "Beyond twice its standard error."
        )
    )


__all__ = [
    "LEARNING_COLUMNS",
    "LEARN_FULL",
    "LEARN_QUICK",
    "LearningSizes",
    "learning_rows",
    "learning_summary",
    "run_learning",
]
