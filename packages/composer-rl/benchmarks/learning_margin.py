"""Does RL beat the SFT policy by more than the seed-to-seed spread? Measured, with its noise.

The same RL configuration runs from the same SFT checkpoint under several seeds (the seed
decides the task order, the sampling and nothing else). The SFT policy and every seed's
final policy are then scored on the same held-out tasks: greedy pass@1, and from
temperature-1 samples their pass@1 (the solve rate) and pass@k. Printed and written to
``WORK_DIR/learning.md`` (with ``learning.png`` and ``learning.json``):

- each policy's rates with their standard error over tasks;
- each seed's margin over SFT with the standard error of the paired difference;
- the run-to-run spread: the standard deviation over seeds of the RL policies' rates;
- the verdict for each rate: the mean margin is above the spread and above three standard
  errors (the issue's bar), or it is not.

Runs and evaluations are kept in the work directory and reused when the command is repeated
(a killed run resumes), so adding a seed costs one run.

    uv run python packages/composer-rl/benchmarks/learning_margin.py \\
        --model runs/stage1/sft/final --seeds 0 1 2
    uv run python packages/composer-rl/benchmarks/learning_margin.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.baselines import baseline_scores
from composer_rl.eval.behaviour import behaviour_rates
from composer_rl.eval.scores import PolicyScores, score_policy
from composer_rl.rl.compare import (
    SPLITS,
    behaviour_margins,
    comparison_rows,
    seed_margins,
    template_rows,
)
from composer_rl.rl.config import load_config
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.rl.run import run_rl


def _quick_run(directory: Path) -> tuple[Path, dict[str, object]]:
    """A random tiny checkpoint and the settings sized for it."""
    return random_checkpoint(directory), dict(QUICK_RL_SETTINGS)


def _parse_set(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(
                f"error: --set takes KEY=VALUE (e.g. train.optim.lr=1e-4), got {item!r}"
            )
        out[key.strip()] = value.strip()
    return out


def _scores(
    path: Path,
    name: str,
    checkpoint: Path,
    tasks: tuple[list[Any], list[Any]],
    runner: Any,
    k: int,
    threads: int,
) -> PolicyScores:
    """Score a checkpoint once; a repeated command reads the kept result."""
    greedy_tasks, k_tasks = tasks
    key = {"tasks": [t.id for t in greedy_tasks], "k_tasks": [t.id for t in k_tasks], "k": k}
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return PolicyScores.from_json(data["scores"])
    began = time.monotonic()
    scores = score_policy(
        name, checkpoint, greedy_tasks, runner=runner, samples_for_k=k, k_tasks=k_tasks,
        threads=threads,
    )  # fmt: skip
    print(f"  scored {name} on {len(greedy_tasks)} + {len(k_tasks)} x {k} episodes in "
          f"{time.monotonic() - began:.0f} s")  # fmt: skip
    path.write_text(json.dumps({"key": key, "scores": scores.to_json()}))
    return scores


def _baselines(
    path: Path,
    model: Path,
    tasks: tuple[list[Any], list[Any]],
    runner: Any,
    k: int,
    threads: int,
) -> dict[str, PolicyScores]:
    """Do-nothing and random on the same tasks, scored once and kept: what a policy that
    does nothing useful earns, beside which every rate is read. Greedy only unless
    `k`: doing nothing is the same every time, and a random model's greedy episode is as
    random as its samples, so the sampled pass would cost a policy's time for no news."""
    greedy_tasks, k_tasks = tasks
    key = {"tasks": [t.id for t in greedy_tasks], "k_tasks": [t.id for t in k_tasks], "k": k}
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return {n: PolicyScores.from_json(v) for n, v in data["scores"].items()}
    began = time.monotonic()
    scores = baseline_scores(
        greedy_tasks, runner, like=model, samples_for_k=k, k_tasks=k_tasks, threads=threads
    )
    print(f"  scored the baselines in {time.monotonic() - began:.0f} s")
    path.write_text(json.dumps({"key": key, "scores": {n: v.to_json() for n, v in scores.items()}}))
    return scores


def baselines_markdown(baselines: dict[str, PolicyScores]) -> str:
    """The baselines' rates on the same tasks, each with its standard error."""
    lines = ["", "Baselines on the same tasks:", "", "| policy | pass@1 (greedy) | pass@1 (T=1) "
             "| pass@k (T=1) |", "| --- | --- | --- | --- |"]  # fmt: skip
    for name, scores in baselines.items():
        sampled = (_fmt(*scores.sampled_pass1()), _fmt(*scores.passk())) if scores.k else ("-", "-")
        lines.append(f"| {name} | {_fmt(*scores.pass1())} | {sampled[0]} | {sampled[1]} |")
    return "\n".join(lines) + "\n"


def _fmt(mean: float, se: float) -> str:
    return f"{mean:.3f}" if math.isnan(se) else f"{mean:.3f} ± {se:.3f}"


def markdown(summary: dict[str, Any], header: str) -> str:
    lines = [header, ""]
    lines.append(
        "| rate | SFT | RL per seed (margin ± paired s.e.) | mean margin ± s.e. | seed spread (s.d.) "
        "| margin > spread | s.e. < margin/3 |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for label, row in summary.items():
        per_seed = "; ".join(
            f"seed {seed}: {s['rate']:.3f} ({s['margin']:+.3f} ± {s['margin_se']:.3f})"
            for seed, s in row["seeds"].items()
        )
        lines.append(
            f"| {label} | {_fmt(*row['sft'])} | {per_seed} "
            f"| {row['margin_mean']:+.3f} ± {row['margin_se']:.3f} "
            f"| {row['seed_spread']:.3f} | {'yes' if row['beats_spread'] else 'no'} "
            f"| {'yes' if row['se_below_third'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def behaviour_markdown(sft: PolicyScores, runs: dict[int, PolicyScores]) -> str:
    """What RL changed in how the policy works, and where pass@1 moved, as markdown tables."""
    lines = ["", "What it learned (every scored episode; paired over tasks):", ""]
    lines.append("| behaviour | tasks | SFT | RL per seed (margin) | mean margin ± s.e. |")
    lines.append("| --- | --- | --- | --- | --- |")
    for row in behaviour_margins(sft, runs):
        per_seed = "; ".join(
            f"seed {seed}: {s['rate']:.3f} ({_signed(s['margin'][0], math.nan)})"
            for seed, s in row["seeds"].items()
        )
        lines.append(
            f"| {row['metric']} | {row['tasks']} | {_fmt(*row['sft'])} | {per_seed} "
            f"| {_signed(*row['margin'])} |"
        )
    lines += ["", "Greedy pass@1 by template (seed by seed, paired over tasks):", ""]
    lines.append("| template | tasks | SFT | RL margin per seed |")
    lines.append("| --- | --- | --- | --- |")
    per_seed_rows = {seed: template_rows(sft, final) for seed, final in runs.items()}
    first = next(iter(per_seed_rows.values()), [])
    for index, row in enumerate(first):
        margins = "; ".join(
            f"seed {seed}: {rows[index]['margin'][0]:+.3f} ± {rows[index]['margin'][1]:.3f}"
            for seed, rows in per_seed_rows.items()
        )
        lines.append(f"| {row['metric']} | {row['tasks']} | {_fmt(*row['sft'])} | {margins} |")
    return "\n".join(lines) + "\n"


def against_markdown(
    base: PolicyScores, other: PolicyScores, baselines: dict[str, PolicyScores]
) -> str:
    """Another policy (another stage one, a reference) against `--model` on the same tasks,
    every rate and behaviour paired over tasks, with where greedy pass@1 moved."""
    lines = ["", f"{other.name} ({other.checkpoint}) against {base.name} ({base.checkpoint}):", ""]
    names = list(baselines)
    lines.append(
        "| metric | tasks | "
        + base.name
        + " | "
        + other.name
        + " | margin ± paired s.e. | "
        + " | ".join(names)
        + " |"
    )
    lines.append("| --- " * (5 + len(names)) + "|")
    for row in comparison_rows(base, other, baselines=baselines):
        cells = [_fmt(*row["baselines"][n]) if n in row["baselines"] else "" for n in names]
        lines.append(
            f"| {row['metric']} | {row['tasks']} | {_fmt(*row['sft'])} | {_fmt(*row['rl'])} "
            f"| {_signed(*row['margin'])} | " + " | ".join(cells) + " |"
        )
    lines += ["", "| template | tasks | " + base.name + " | margin |", "| --- | --- | --- | --- |"]
    for row in template_rows(base, other):
        lines.append(
            f"| {row['metric']} | {row['tasks']} | {_fmt(*row['sft'])} | {_signed(*row['margin'])} |"
        )
    return "\n".join(lines) + "\n"


def _signed(mean: float, se: float) -> str:
    """A margin with its s.e.; '-' where no task pairs (none solved by both policies)."""
    if math.isnan(mean):
        return "-"
    return f"{mean:+.3f}" if math.isnan(se) else f"{mean:+.3f} ± {se:.3f}"


def policy_markdown(scores: PolicyScores, what: str) -> str:
    """One policy's rates and behaviours, each with its standard error over tasks: what the
    demonstration mix is chosen by (a real choice at T=1 and greedily; pass@k above pass@1)."""
    lines = [f"{scores.name}: {what}", "", "| rate | value |", "| --- | --- |"]
    lines.append(f"| pass@1 (greedy) | {_fmt(*scores.pass1())} |")
    if scores.k:
        lines.append(f"| pass@1 (T=1) | {_fmt(*scores.sampled_pass1())} |")
        lines.append(f"| pass@{scores.k} (T=1) | {_fmt(*scores.passk())} |")
    for difficulty, (mean, se, n) in sorted(scores.by_difficulty.items()):
        lines.append(f"| pass@1 (greedy), difficulty {difficulty} ({n} tasks) | {_fmt(mean, se)} |")
    lines += ["", "| behaviour | greedy (tasks) | T=1 (tasks) |", "| --- | --- | --- |"]
    greedy = behaviour_rates(scores.behaviours_greedy)
    sampled = behaviour_rates(scores.behaviours_sampled)
    for name in dict.fromkeys([*greedy, *sampled]):
        cells = [
            f"{_fmt(*rates[name][:2])} ({rates[name][2]})" if name in rates else "-"
            for rates in (greedy, sampled)
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(3.6 * len(summary), 3.4), squeeze=False)
    for ax, (label, row) in zip(axes[0], summary.items(), strict=True):
        seeds = list(row["seeds"])
        ax.axhline(row["sft"][0], color="grey", label="SFT")
        ax.axhspan(row["sft"][0] - row["sft"][1], row["sft"][0] + row["sft"][1], color="grey",
                   alpha=0.2)  # fmt: skip
        ax.errorbar(
            range(len(seeds)),
            [row["seeds"][s]["rate"] for s in seeds],
            yerr=[row["seeds"][s]["margin_se"] for s in seeds],
            fmt="o",
            capsize=4,
            label="RL (± paired s.e.)",
        )
        ax.set_xticks(range(len(seeds)), [f"seed {s}" for s in seeds])
        ax.set_title(f"{label}: margin {row['margin_mean']:+.3f}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _against(
    args: argparse.Namespace,
    sft: PolicyScores,
    baselines: dict[str, PolicyScores],
    scores_dir: Path,
    tasks: tuple[list[Any], list[Any]],
    runner: Any,
) -> str:
    """Each `--against` policy scored on the same tasks and set beside `--model`."""
    text = ""
    for checkpoint in args.against:
        # Kept under the checkpoint's path: the scores' key holds the tasks, not the policy.
        name = re.sub(r"[^A-Za-z0-9]+", "-", str(checkpoint)).strip("-")
        other = _scores(scores_dir / f"scores-against-{name}.json", name, checkpoint, tasks,
                        runner, args.k, args.threads)  # fmt: skip
        text += against_markdown(sft, other, baselines)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="the SFT checkpoint RL starts from")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2],
                        help="RL seeds (none: only score the SFT policy)")  # fmt: skip
    parser.add_argument("--per-template", type=int, default=10,
                        help="held-out tasks a template (0: all of them)")  # fmt: skip
    parser.add_argument("--k", type=int, default=8, help="temperature-1 samples a task (pass@k)")
    parser.add_argument("--k-per-template", type=int, default=4,
                        help="held-out tasks a template for the sampled pass (a subset)")  # fmt: skip
    parser.add_argument(
        "--split",
        choices=sorted(SPLITS),
        default="heldout",
        help="the tasks scored: held-out (the claim) or validation (carved from train; "
        "settings are chosen on it)",
    )
    parser.add_argument("--config", type=Path, help="RL configuration (TOML), as for `rl`")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="RL settings over the file, e.g. train.optim.lr=1e-4 loop.steps=40")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only-seeds", action="store_true",
                        help="run and score the seeds only (another process scores SFT and "
                        "the baselines; a later call without it reads every kept score)")  # fmt: skip
    parser.add_argument("--sampled-baselines", action="store_true",
                        help="also sample the baselines at T=1 (pass@k; a policy's cost)")  # fmt: skip
    parser.add_argument("--against", type=Path, nargs="*", default=[], metavar="CHECKPOINT",
                        help="other policies (another stage one, a reference) scored on the same "
                        "tasks and compared with --model, paired over tasks")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a random tiny model, two steps")
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="runs and scores are kept (and reused) here (default: runs/learning; with "
        "--quick a new temporary directory)",
    )
    args = parser.parse_args()
    for checkpoint in ([args.model] if args.model else []) + args.against:
        if not (checkpoint / "tokenizer.json").is_file():
            print(f"error: {checkpoint} is no checkpoint (no tokenizer.json): give a stage-one "
                  "or RL final/ directory", file=sys.stderr)  # fmt: skip
            return 2
    work = args.work_dir or (
        Path(tempfile.mkdtemp(prefix="learning-margin-")) if args.quick else Path("runs/learning")
    )
    work.mkdir(parents=True, exist_ok=True)
    overrides = _parse_set(args.set)
    model = args.model
    if args.quick or model is None:
        model, quick = _quick_run(work / "tiny")
        quick.update({"loop.steps": 2, "loop.group_size": 2, "loop.groups_per_step": 1})
        overrides = {**quick, **overrides}
        args.seeds, args.per_template, args.k, args.k_per_template = args.seeds[:2], 1, 2, 1
    draw = SPLITS[args.split]
    greedy_tasks = draw(args.per_template, seed=0)
    # --per-template 0 scores every task greedily; the sampled pass stays a subset.
    k_per = min(args.k_per_template, args.per_template or args.k_per_template)
    tasks = (greedy_tasks, draw(k_per, seed=0))
    # Scores of another split are kept apart from held-out ones; the RL runs are shared.
    scores_dir = work if args.split == "heldout" else work / args.split
    scores_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[int, PolicyScores] = {}
    runner = None
    for seed in args.seeds:
        config = load_config(
            args.config,
            {
                **overrides,
                "model": str(model),
                "run_dir": str(work / f"seed{seed}"),
                "seed": seed,
                "local": True,
                "threads": args.threads,
                "eval.per_template": 0,
            },
        )
        runner = config.rollout
        final = config.run_dir / "final"
        if not (final / "tokenizer.json").is_file():
            began = time.monotonic()
            run_rl(config)
            print(f"seed {seed}: RL run in {time.monotonic() - began:.0f} s -> {final}")
        runs[seed] = _scores(
            scores_dir / f"scores-seed{seed}.json", f"rl-seed{seed}", final, tasks, runner, args.k,
            args.threads,
        )  # fmt: skip
    if args.only_seeds:
        return 0
    if runner is None:
        runner = load_config(args.config, {**overrides, "model": str(model)}).rollout
    sft = _scores(scores_dir / "scores-sft.json", "sft", model, tasks, runner, args.k, args.threads)
    baselines = _baselines(
        scores_dir / "scores-baselines.json",
        model,
        tasks,
        runner,
        args.k if args.sampled_baselines else 0,
        args.threads,
    )
    if not runs:
        text = policy_markdown(sft, f"{model} on {len(greedy_tasks)} {args.split} tasks "
                               f"({len(tasks[1])} of them sampled {args.k} times at T=1)")  # fmt: skip
        text += baselines_markdown(baselines)
        text += _against(args, sft, baselines, scores_dir, tasks, runner)
        print(text)
        (scores_dir / f"policy-{sft.name}.md").write_text(text)
        return 0
    summary = seed_margins(sft, runs)
    header = (
        f"RL from {model} on {len(greedy_tasks)} {args.split} tasks ({args.per_template} a template; "
        f"{len(tasks[1])} of them sampled {args.k} times at T=1), seeds {args.seeds}; "
        f"settings: {overrides or 'defaults'}"
    )
    text = markdown(summary, header) + baselines_markdown(baselines) + behaviour_markdown(sft, runs)
    text += _against(args, sft, baselines, scores_dir, tasks, runner)
    print(text)
    (scores_dir / "learning.md").write_text(text)
    (scores_dir / "learning.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"plot: {plot(summary, scores_dir / 'learning.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
