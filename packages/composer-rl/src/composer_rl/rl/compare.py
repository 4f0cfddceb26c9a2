"""Did RL help? The final policy against the SFT policy on the same held-out tasks, with noise.

Both checkpoints run the same held-out tasks (greedy for pass@1; sampled for pass@k when
asked), each scored by `composer_rl.eval.scores.score_policy`. Every rate comes with its
standard error over tasks, and the RL-minus-SFT margin with the standard error of the paired
difference (the same task under both policies), which is far tighter than two independent
errors because task difficulty cancels.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from composer_rl.eval.behaviour import BEHAVIOURS
from composer_rl.eval.scores import PolicyScores
from composer_rl.eval.stats import mean_se
from composer_rl.plugins import JobPlugins
from composer_rl.tasks import Split, collect_tasks, sample_tasks
from composer_rl.tasks.invented import NameKind
from composer_rl.tasks.model import Task
from composer_rl.tasks.templates.base import is_validation


def heldout_tasks(
    per_template: int, seed: int = 0, plugins: JobPlugins | None = None
) -> list[Task]:
    """The held-out split (sampled `per_template` a template): the built-in templates', and
    with a job's `plugins` its plugin task sources' too."""
    tasks = collect_tasks(Split.HELDOUT, pm=plugins.pm if plugins is not None else None)
    return sample_tasks(tasks, per_template, seed=seed) if per_template else tasks


def validation_tasks(per_template: int, seed: int = 0) -> list[Task]:
    """Tasks of the validation split carved from train (`is_validation`): settings are
    chosen on these, never on the held-out split. Stage one and RL train on none of them."""
    tasks = [t for t in collect_tasks(Split.TRAIN, pm=None) if is_validation(t)]
    return sample_tasks(tasks, per_template, seed=seed) if per_template else tasks


def validation_invented_tasks(
    per_template: int, seed: int = 0, kind: NameKind = "syllables"
) -> list[Task]:
    """The validation tasks rendered again with invented names (`composer_rl.tasks.invented`).

    Validation tasks reuse the training names, so a policy can recall them; held-out tasks
    use names no training task uses, and must not choose settings. These take names no task
    of either split uses, so they measure copying a new name, as held-out does, without
    touching it. Tasks of templates that cannot be renamed (fix_ci, move_callers) drop out."""
    import random

    from composer_rl.tasks.invented import with_invented_names

    rng = random.Random(7919 + seed)
    renamed = (
        with_invented_names(task, rng, kind) for task in validation_tasks(per_template, seed)
    )
    return [task for task in renamed if task is not None]


def validation_words_tasks(per_template: int, seed: int = 0) -> list[Task]:
    """`validation_invented_tasks` with words for names (`invented.VALIDATION_WORDS`, which
    no demonstration uses): new names of the held-out split's kind, which syllable strings
    are not."""
    return validation_invented_tasks(per_template, seed, kind="validation_words")


SPLITS = {
    "heldout": heldout_tasks,
    "validation": validation_tasks,
    "validation_invented": validation_invented_tasks,
    "validation_words": validation_words_tasks,
}
"""The task sets a comparison can be scored on, by name."""


def template_of(task_id: str) -> str:
    """The template of a built-in task id (`<template>-<digest>`)."""
    return task_id.rsplit("-", 1)[0]


def paired_margin(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    """Mean of b - a over the tasks both scored, and its standard error."""
    common = sorted(set(a) & set(b))
    mean, se = mean_se([b[t] - a[t] for t in common])
    return mean, se, len(common)


RATES = (
    ("pass@1 (greedy)", "per_task_pass1"),
    ("pass@1 (T=1)", "per_task_sampled_pass1"),
    ("pass@k (T=1)", "per_task_passk"),
)
"""The per-task rates `seed_margins` compares, by label and `PolicyScores` attribute."""


def seed_margins(sft: PolicyScores, runs: dict[int, PolicyScores]) -> dict[str, Any]:
    """RL from one SFT policy under several seeds, each scored on the same tasks as SFT.

    Per rate: SFT's value and standard error; each seed's rate and paired margin over SFT
    with its standard error; the seed-to-seed spread (standard deviation of the RL rates);
    and the two tests a learning claim must pass: the mean margin exceeds the spread, and
    the margin's standard error over tasks is below a third of the margin.
    """
    out: dict[str, Any] = {}
    for label, attribute in RATES:
        base = getattr(sft, attribute)
        if not base:
            continue
        seeds = {}
        for seed, final in runs.items():
            mean, se, n = paired_margin(base, getattr(final, attribute))
            rate = statistics.fmean(getattr(final, attribute).values())
            seeds[seed] = {"rate": rate, "margin": mean, "margin_se": se, "tasks": n}
        rates = [s["rate"] for s in seeds.values()]
        margins = [s["margin"] for s in seeds.values()]
        spread = statistics.stdev(rates) if len(rates) > 1 else math.nan
        margin = statistics.fmean(margins)
        # The mean margin's standard error over tasks: the seeds share the tasks, so the unit
        # is a task's RL-minus-SFT difference averaged over the seeds.
        finals = [getattr(final, attribute) for final in runs.values()]
        common = sorted(set(base).intersection(*finals))
        _, se = mean_se(statistics.fmean(f[t] for f in finals) - base[t] for t in common)
        out[label] = {
            "sft": mean_se(base.values()),
            "seeds": seeds,
            "margin_mean": margin,
            "margin_se": se,
            "seed_spread": spread,
            "beats_spread": bool(margin > spread) if not math.isnan(spread) else False,
            "se_below_third": bool(se < margin / 3),
        }
    return out


TOKENS_ROW = "tokens per solved difficulty-1 task"


def behaviour_margins(sft: PolicyScores, runs: dict[int, PolicyScores]) -> list[dict[str, Any]]:
    """What RL changed in how the policy works, over seeds: for each behaviour (and tokens
    per solved difficulty-1 task) SFT's rate, each seed's rate and paired margin, and the
    mean margin with its standard error over tasks (a task's margin averaged over seeds)."""
    rows: list[dict[str, Any]] = []

    def values(policy: PolicyScores, name: str) -> dict[str, float]:
        if name == TOKENS_ROW:
            return policy.tokens_per_solved_d1
        return policy.behaviours.get(name, {})

    for name in (*BEHAVIOURS, TOKENS_ROW):
        base = values(sft, name)
        finals = {seed: values(final, name) for seed, final in runs.items()}
        if not base or not all(finals.values()):
            continue
        seeds = {
            seed: {"rate": mean_se(f.values())[0], "margin": _paired_or_nan(base, f)}
            for seed, f in finals.items()
        }
        common = sorted(set(base).intersection(*finals.values()))
        margin = (
            mean_se(statistics.fmean(f[t] for f in finals.values()) - base[t] for t in common)
            if common
            else (math.nan, math.nan)
        )
        rows.append(
            {"metric": name, "sft": mean_se(base.values()), "seeds": seeds, "margin": margin,
             "tasks": len(common)}
        )  # fmt: skip
    return rows


def _paired_or_nan(base: dict[str, float], final: dict[str, float]) -> tuple[float, float]:
    """`paired_margin`'s (mean, s.e.), NaN for both where no task has both values: tokens per
    solved task pair only the tasks both policies solved, and none may be, which is not a
    margin of zero."""
    mean, se, n = paired_margin(base, final)
    return (mean, se) if n else (math.nan, math.nan)


def comparison_rows(
    base: PolicyScores,
    final: PolicyScores,
    baselines: dict[str, PolicyScores] | None = None,
) -> list[dict[str, Any]]:
    """The table `composer-rl rl` prints: each metric for both policies and the margin.

    With `baselines` (`composer_rl.eval.baselines.baseline_scores`, greedy), the greedy
    pass@1 and behaviour rows also carry each baseline's rate on the same tasks (a row's
    `baselines`), so a reader sees what doing nothing earns beside what RL earned."""
    rows = _comparison_rows(base, final)
    for row in rows:
        row["baselines"] = {
            name: rate
            for name, scores in (baselines or {}).items()
            if (rate := _greedy_rate(scores, row["metric"])) is not None
        }
    return rows


def _greedy_rate(scores: PolicyScores, metric: str) -> tuple[float, float] | None:
    """`scores`' greedy rate of a comparison row's metric, None where it has none."""
    if metric == "pass@1":
        return scores.pass1()
    if metric in scores.behaviours:
        return mean_se(scores.behaviours[metric].values())
    return None


def _comparison_rows(base: PolicyScores, final: PolicyScores) -> list[dict[str, Any]]:
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
    for name in BEHAVIOURS:
        if name in base.behaviours and name in final.behaviours:
            rows.append(_paired_row(name, base.behaviours[name], final.behaviours[name]))
    if base.tokens_per_solved_d1 and final.tokens_per_solved_d1:
        rows.append(
            _paired_row(
                TOKENS_ROW,
                base.tokens_per_solved_d1,
                final.tokens_per_solved_d1,
            )
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


def _paired_row(metric: str, base: dict[str, float], final: dict[str, float]) -> dict[str, Any]:
    """One comparison row: each policy's mean over its tasks, and the margin paired over the
    tasks both have (behaviours apply to different tasks for different policies: `recovered`
    only where a test run failed)."""
    margin = paired_margin(base, final)
    return {
        "metric": metric,
        "sft": mean_se(base.values()),
        "rl": mean_se(final.values()),
        "margin": margin[:2],
        "tasks": margin[2],
    }


def template_rows(base: PolicyScores, final: PolicyScores) -> list[dict[str, Any]]:
    """Greedy pass@1 per template, each policy's and the paired margin: where RL moved."""
    by_template: dict[str, list[str]] = {}
    for task_id in sorted(set(base.per_task_pass1) & set(final.per_task_pass1)):
        by_template.setdefault(template_of(task_id), []).append(task_id)
    return [
        _paired_row(
            template,
            {t: base.per_task_pass1[t] for t in ids},
            {t: final.per_task_pass1[t] for t in ids},
        )
        for template, ids in sorted(by_template.items())
    ]


__all__ = [
    "SPLITS",
    "behaviour_margins",
    "comparison_rows",
    "heldout_tasks",
    "paired_margin",
    "seed_margins",
    "template_of",
    "template_rows",
    "validation_invented_tasks",
    "validation_tasks",
]
