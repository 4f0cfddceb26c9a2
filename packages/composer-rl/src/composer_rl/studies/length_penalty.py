"""length-penalty: the concave penalty against none and against a linear one of the same strength.

The report's claim: with C(x) = ((1 + kx)^(1-q) - 1) / (k(1-q)), the first tokens of an
episode cost the most, so easy tasks learn to finish fast, while hard tasks (which need
their length) are not pushed into giving up the way a linear cost would push them.

Three RL runs from the same checkpoint, seed and settings; only the `length` reward differs:

- `concave`: the plugin's defaults (k, q and weight of `composer_rewards.LengthSettings`);
- `linear`: k = 0 (C(x) = x), its weight chosen so that the penalty equals the concave one
  at x_ref, the median x of the concave run's first-step episodes (sampled by the starting
  policy, before any update), recovered from the logged component;
- `none`: weight 0.

Each variant charges its cost on every episode (`charged = "always"`, the plugin's default
until 2026-12-06): the study is about the cost's shape on episodes of every outcome, and
the linear weight is fixed from the lengths of first-step episodes of every outcome.

The sampler's hard-task upsampling is off (it reads the episodes' lengths, so it would give
each variant other tasks); with the same seed every run draws the same tasks in the same
order. Training is single-epoch, so each episode is the first attempt of its policy on a new
task: the episodes of the second half of each run (oldest token sampled at version >=
steps / 2) measure the trained policy on unseen tasks at the sampling temperature. They are
compared on the tasks all three runs attempted there, by difficulty: generated tokens and
turns per episode, and the solve rate, with standard errors over episodes, and the paired
difference to `none` (per task, then mean and standard error over tasks).
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from composer_rewards import length_cost, length_x_from_cost
from composer_rewards.rewards.length import LengthSettings
from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.stats import format_se, mean_se
from composer_rl.rl.episodes import read_episodes
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.studies.base import RANDOM_POLICY_NOTE, StudyOptions, StudyOutcome, Verdict
from composer_rl.studies.rl_runs import RLSizes, late_episodes, run_or_reuse

VARIANTS = ("concave", "linear", "none")  # concave first: its first step fixes the linear weight
METRICS = ("generated_tokens", "turns", "solved")


QUICK = RLSizes(steps=8, group_size=2, groups_per_step=1, lr=None)
# lr 3e-4 as in the learning runs of the composer-rl README: at the default 1e-4 the policy
# moves too little in 20 steps for any reward to change behaviour.
FULL = RLSizes(steps=20, group_size=8, groups_per_step=8, lr=3e-4)


def reference_x(episodes: list[dict[str, Any]], settings: LengthSettings) -> float:
    """Median x of the episodes sampled by version 0 (the starting policy)."""
    xs = [
        length_x_from_cost(-e["components"]["length"] / settings.weight, settings.k, settings.q)
        for e in episodes
        if max(e["versions"]) == 0 and "length" in e["components"]
    ]
    if not xs:
        raise RuntimeError("the concave run logged no first-step episode with a length component")
    return statistics.median(xs)


def linear_weight(settings: LengthSettings, x_ref: float) -> float:
    """The weight of C(x) = x whose penalty at x_ref equals the concave one's."""
    return settings.weight * length_cost(x_ref, settings.k, settings.q) / x_ref


def compare(late: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per difficulty: each variant's means, and paired differences to `none` over tasks."""
    common = set.intersection(*({e["task"] for e in eps} for eps in late.values()))
    difficulty = {e["task"]: int(e["difficulty"]) for eps in late.values() for e in eps}
    by_task: dict[str, dict[str, dict[str, list[float]]]] = {}
    for variant, eps in late.items():
        tasks: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for e in eps:
            if e["task"] in common:
                for metric in METRICS:
                    tasks[e["task"]][metric].append(float(e[metric]))
        by_task[variant] = tasks
    out: dict[str, Any] = {"common_tasks": len(common), "difficulties": {}}
    for d in sorted({difficulty[t] for t in common}):
        tasks_d = sorted(t for t in common if difficulty[t] == d)
        row: dict[str, Any] = {"tasks": len(tasks_d), "variants": {}, "vs_none": {}}
        for variant, tasks in by_task.items():
            stats: dict[str, Any] = {"episodes": sum(len(tasks[t]["solved"]) for t in tasks_d)}
            for metric in METRICS:
                values = [v for t in tasks_d for v in tasks[t][metric]]
                stats[metric] = mean_se(values)
            row["variants"][variant] = stats
        for variant in ("concave", "linear"):
            diffs = {}
            for metric in METRICS:
                per_task = [
                    statistics.fmean(by_task[variant][t][metric])
                    - statistics.fmean(by_task["none"][t][metric])
                    for t in tasks_d
                ]
                diffs[metric] = mean_se(per_task)
            row["vs_none"][variant] = diffs
        out["difficulties"][str(d)] = row
    return out


def group_counts(episodes: list[dict[str, Any]], history: list[dict[str, Any]]) -> dict[str, int]:
    """Groups generated, those whose episodes disagree on `solved`, those dropped as constant."""
    solved: dict[str, set[bool]] = defaultdict(set)
    for e in episodes:
        solved[e["group"]].add(bool(e["solved"]))
    return {
        "generated": len(solved),
        "mixed_correctness": sum(1 for s in solved.values() if len(s) > 1),
        "dropped_constant": int(history[-1]["count_groups_constant"]) if history else 0,
    }


def run_variants(
    model: Path, work: Path, sizes: RLSizes, base: dict[str, object], seed: int
) -> dict[str, Any]:
    """Run the three variants; the comparison, the settings each used and per-step lengths."""
    concave = LengthSettings()
    histories: dict[str, list[dict[str, Any]]] = {}
    episodes: dict[str, list[dict[str, Any]]] = {}
    settings: dict[str, dict[str, float]] = {}
    reused: dict[str, bool] = {}
    x_ref = math.nan
    for variant in VARIANTS:
        reward: dict[str, object] = {}
        if variant == "linear":
            x_ref = reference_x(episodes["concave"], concave)
            weight = linear_weight(concave, x_ref)
            reward = {"rewards.length.k": 0.0, "rewards.length.weight": weight}
            settings[variant] = {"k": 0.0, "q": concave.q, "weight": weight}
        elif variant == "none":
            reward = {"rewards.length.weight": 0.0}
            settings[variant] = {"k": concave.k, "q": concave.q, "weight": 0.0}
        else:
            settings[variant] = {"k": concave.k, "q": concave.q, "weight": concave.weight}
        run_dir = work / variant
        histories[variant], reused[variant] = run_or_reuse(
            model, run_dir, sizes, {**base, "rewards.length.charged": "always", **reward}, seed
        )
        episodes[variant] = read_episodes(run_dir)
    late = {v: late_episodes(eps, sizes.steps) for v, eps in episodes.items()}
    return {
        "x_ref": x_ref,
        "settings": settings,
        "comparison": compare(late),
        "late_episodes": {v: len(eps) for v, eps in late.items()},
        "tokens_per_step": {
            v: [
                statistics.fmean(float(e["generated_tokens"]) for e in eps_s)
                if (eps_s := [e for e in episodes[v] if max(e["versions"]) == s])
                else math.nan
                for s in range(sizes.steps)
            ]
            for v in VARIANTS
        },
        "steps_trained": {v: len(h) for v, h in histories.items()},
        "groups": {v: group_counts(episodes[v], histories[v]) for v in VARIANTS},
        "reused_runs": sorted(v for v, r in reused.items() if r),
    }


def _fmt(pair: tuple[float, float], digits: int = 1) -> str:
    return format_se(*pair, digits=digits)


def _signed(pair: tuple[float, float], digits: int = 1) -> str:
    return format_se(*pair, digits=digits, sign=True)


def _figure(result: dict[str, Any]) -> Figure:
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    rows = result["comparison"]["difficulties"]
    difficulties = list(rows)
    width = 0.27
    for ax, metric, label in zip(
        axes[:3],
        METRICS,
        ("generated tokens per episode", "turns per episode", "solve rate"),
        strict=True,
    ):
        for i, variant in enumerate(VARIANTS):
            means = [rows[d]["variants"][variant][metric][0] for d in difficulties]
            errors = [rows[d]["variants"][variant][metric][1] for d in difficulties]
            positions = [j + (i - 1) * width for j in range(len(difficulties))]
            ax.bar(positions, means, width, yerr=errors, capsize=3, label=variant)
        ax.set_xticks(range(len(difficulties)), [f"difficulty {d}" for d in difficulties])
        ax.set(ylabel=label, title=f"{label}, second half")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
    for variant, per_step in result["tokens_per_step"].items():
        axes[3].plot(range(len(per_step)), per_step, "o-", label=variant, markersize=3)
    axes[3].set(
        xlabel="policy version", ylabel="generated tokens per episode", title="over the run"
    )
    axes[3].grid(True, alpha=0.3)
    axes[3].legend()
    fig.suptitle("length-penalty: concave against linear (same strength at x_ref) and none")
    fig.tight_layout()
    return fig


def _verdict(result: dict[str, Any]) -> Verdict:
    rows = result["comparison"]["difficulties"]
    if "1" not in rows or not any(int(d) > 1 for d in rows):
        return Verdict(
            "undecided",
            "no comparison",
            "Too few common tasks of each difficulty.",
            "rests on tasks of each difficulty that every run attempted",
        )
    easy = rows["1"]["vs_none"]["concave"]["generated_tokens"]
    hard = [rows[d]["vs_none"]["concave"]["solved"] for d in rows if int(d) > 1]
    easy_linear = rows["1"]["vs_none"]["linear"]["generated_tokens"]
    if any(math.isnan(se) for _, se in [easy, *hard]):
        return Verdict(
            "undecided",
            "too few tasks for standard errors",
            "Too few common tasks.",
            "rests on more common tasks",
        )
    shorter = easy[0] + 2 * easy[1] < 0
    # "Without hurting the solve rate": no harder difficulty loses more than 2 s.e.
    kept = all(mean + 2 * se >= 0 for mean, se in hard)
    hard_text = ", ".join(
        f"difficulty {d}: {_signed(rows[d]['vs_none']['concave']['solved'], 3)}"
        for d in rows
        if int(d) > 1
    )
    summary = (
        f"Against no penalty, on {result['comparison']['common_tasks']} tasks all runs attempted "
        f"in their second half: easy (difficulty 1) episodes changed by {_signed(easy)} tokens "
        f"with the concave penalty and {_signed(easy_linear)} with the linear one; the concave "
        f"penalty's solve rate on harder tasks changed by {hard_text}."
    )
    strength = f"easy episodes {_signed(easy)} tokens"
    if shorter and kept:
        return Verdict("held", strength + ", harder solve rates within 2 s.e.", summary)
    if not shorter:
        return Verdict("did not hold", strength + " (not shorter beyond 2 s.e.)", summary)
    return Verdict(
        "held in part",
        strength + ", but a harder solve rate fell beyond 2 s.e.",
        summary,
        "easy episodes got shorter; the solve rate on harder tasks was not kept",
    )


def run(options: StudyOptions) -> StudyOutcome:
    sizes = QUICK if options.quick else FULL
    with tempfile.TemporaryDirectory(prefix="study-length-") as tmp:
        work = options.work_dir or Path(tmp)
        base: dict[str, object] = {}
        model = options.checkpoint
        if model is None:
            model = random_checkpoint(work / "random-policy", seed=options.seed)
            base = dict(QUICK_RL_SETTINGS)
        result = run_variants(model, work, sizes, base, options.seed)
    rows = []
    for d, row in result["comparison"]["difficulties"].items():
        for variant in VARIANTS:
            stats = row["variants"][variant]
            paired = row["vs_none"].get(variant)
            rows.append(
                [
                    d,
                    variant,
                    f"{row['tasks']} / {stats['episodes']}",
                    _fmt(stats["generated_tokens"]),
                    _fmt(stats["turns"], 2),
                    _fmt(stats["solved"], 3),
                    _signed(paired["generated_tokens"]) if paired else "",
                    _signed(paired["turns"], 2) if paired else "",
                    _signed(paired["solved"], 3) if paired else "",
                ]
            )
    weights = result["settings"]
    notes = [
        f"x_ref (median length measure of the starting policy's episodes): {result['x_ref']:.0f}; "
        f"concave k={weights['concave']['k']:g}, q={weights['concave']['q']:g}, weight "
        f"{weights['concave']['weight']:g}; linear weight {weights['linear']['weight']:.3g} "
        "(equal penalty at x_ref).",
        f"Second-half episodes: {result['late_episodes']}; compared on the "
        f"{result['comparison']['common_tasks']} tasks all three attempted there. Means ± "
        "standard error over episodes; differences to `none` paired by task (± s.e. over tasks).",
        f"Each run: {sizes.steps} steps x {sizes.groups_per_step} groups x {sizes.group_size} "
        "episodes, same seed, hard-task upsampling off, services in one process.",
        "Groups (generated / with both solved and unsolved episodes / dropped as constant): "
        + "; ".join(
            f"{v} {g['generated']} / {g['mixed_correctness']} / {g['dropped_constant']}"
            for v, g in result["groups"].items()
        )
        + ". Every run trains the same number of groups; a penalty makes almost no group "
        "constant, so fewer of the trained groups carry a correctness signal.",
    ]
    if result["reused_runs"]:
        notes.append(
            f"Reused finished runs from --work-dir (not rerun): {', '.join(result['reused_runs'])}; "
            "the wall-clock below is this command's, not theirs."
        )
    if options.checkpoint is None:
        notes.append(RANDOM_POLICY_NOTE)
    return StudyOutcome(
        columns=[
            "difficulty",
            "variant",
            "tasks / episodes",
            "tokens per episode",
            "turns",
            "solve rate",
            "tokens vs none",
            "turns vs none",
            "solve rate vs none",
        ],
        rows=rows,
        figure=_figure(result),
        verdict=_verdict(result),
        numbers={
            "sizes": sizes.__dict__,
            "checkpoint": str(options.checkpoint) if options.checkpoint else None,
            **result,
        },
        notes=notes,
    )
