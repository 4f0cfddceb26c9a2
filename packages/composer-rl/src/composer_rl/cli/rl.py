"""``composer-rl rl``: asynchronous RL from a stage-one checkpoint, then the final comparison."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from composer_rl.cli._ray_args import RAY_ADDRESS_ENV


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from composer_rl.rl.config import add_config_flags

    parser = subparsers.add_parser(
        "rl",
        help="asynchronous RL on the built-in tasks from a stage-one checkpoint (resumable)",
        description=(
            "Runs (or resumes) the asynchronous RL loop on the services, then evaluates the "
            "final policy against the starting one on held-out tasks. Every setting is a flag "
            "(--section.field) or a key of a TOML file given with --config; flags win. "
            f"--ray-address defaults to ${RAY_ADDRESS_ENV}."
        ),
    )
    add_config_flags(parser)
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="plain progress lines instead of a bar (what a log file or a pipe gets anyway)",
    )
    parser.set_defaults(handler=main)


def _fmt(pair: tuple[float, float]) -> str:
    from composer_rl.eval.stats import format_se

    return "-" if math.isnan(pair[0]) else format_se(*pair)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from composer_rl.eval.baselines import baseline_scores
    from composer_rl.eval.scores import score_policy
    from composer_rl.plugins import JobPlugins
    from composer_rl.progress import Show, StepProgress, phase_line
    from composer_rl.rl.compare import comparison_rows, heldout_tasks, template_rows
    from composer_rl.rl.config import ConfigError, config_from_args
    from composer_rl.rl.plots import plot_comparison, plot_training
    from composer_rl.rl.run import preflight, run_rl

    if getattr(args, "cfg::ray_address", None) is None and os.environ.get(RAY_ADDRESS_ENV):
        setattr(args, "cfg::ray_address", os.environ[RAY_ADDRESS_ENV].strip())
    try:
        config = config_from_args(args)
        preflight(config)
    except ConfigError as error:
        # One line that says what to change, before any service starts.
        print(f"error: {error}", file=sys.stderr)
        return 2
    console = Console()
    # The job's one plugin manager: the loop and the final comparison score with it, and
    # look task sources, weight stores and sandbox backends up in it.
    plugins = JobPlugins(config.plugin_run_config())
    show: Show = "lines" if args.no_progress else True
    phase_line("rl", f"starting the services ({'in this process' if config.local else 'Ray'})")
    with StepProgress("rl", config.loop.steps, show=show) as progress:
        progress.message("starting services")

        def on_step(row: dict[str, Any]) -> None:
            reward = row.get("reward_mean")
            progress.update(
                int(row["step"]),
                info=f"reward {reward:.3f}, lag {row['token_lag_mean']:.1f}"
                if reward is not None
                else "",
            )

        history = run_rl(config, on_step=on_step, plugins=plugins)
    run_dir = config.run_dir
    training_png = plot_training(run_dir)
    summary: dict[str, Any] = {"steps_this_call": len(history), "run_dir": str(run_dir)}
    if history:
        summary["generation_tokens_per_s"] = sum(
            r["generation_tokens_per_s"] for r in history
        ) / len(history)
        summary["token_lag_mean"] = sum(r["token_lag_mean"] for r in history) / len(history)
    if config.eval.per_template:
        tasks = heldout_tasks(config.eval.per_template, seed=0, plugins=plugins)
        k = config.eval.pass_k_samples if config.eval.pass_k_samples > 1 else 0
        k_tasks = heldout_tasks(
            min(config.eval.k_per_template, config.eval.per_template), seed=0, plugins=plugins
        )
        runner = config.rollout
        console.print(
            f"evaluating the SFT and the RL policy on {len(tasks)} held-out tasks (greedy)"
            + (f" and {len(k_tasks)} of them {k} times at temperature 1" if k else "")
        )
        scores = []
        for name, path in (("sft", config.model), ("rl", run_dir / "final")):
            began = time.monotonic()
            phase_line("evaluation", f"scoring the {name.upper()} policy ({path})")
            scores.append(
                score_policy(name, path, tasks, runner=runner, samples_for_k=k, k_tasks=k_tasks,
                             threads=config.threads, batch=config.eval.batch, plugins=plugins)
            )  # fmt: skip
            phase_line(
                "evaluation", f"{name.upper()} policy scored in {time.monotonic() - began:.0f} s"
            )
        began = time.monotonic()
        phase_line("evaluation", "scoring the do-nothing and random baselines (greedy)")
        baselines = baseline_scores(
            tasks,
            runner,
            like=config.model,
            threads=config.threads,
            batch=config.eval.batch,
            plugins=plugins,
        )
        phase_line("evaluation", f"baselines scored in {time.monotonic() - began:.0f} s")
        rows = comparison_rows(scores[0], scores[1], baselines=baselines)
        table = Table(title=f"held-out: SFT ({config.model}) against RL ({run_dir / 'final'})")
        names = list(baselines)
        for column in ("metric", "tasks", "SFT", "RL", "RL - SFT (paired)", *names):
            table.add_column(column.replace("_", "-"))
        for row in rows:
            table.add_row(
                row["metric"],
                str(row["tasks"]),
                _fmt(row["sft"]),
                _fmt(row["rl"]),
                _fmt(row["margin"]),
                *(_fmt(row["baselines"].get(n, (math.nan, math.nan))) for n in names),
            )
        console.print(table)
        by_template = template_rows(*scores)
        table = Table(title="greedy pass@1 by template (where RL moved)")
        for column in ("template", "tasks", "SFT", "RL", "RL - SFT (paired)"):
            table.add_column(column)
        for row in by_template:
            table.add_row(
                row["metric"], str(row["tasks"]), _fmt(row["sft"]), _fmt(row["rl"]),
                _fmt(row["margin"]),
            )  # fmt: skip
        console.print(table)
        summary["comparison"] = rows
        summary["by_template"] = by_template
        summary["reward_mean"] = {s.name: s.reward_mean for s in scores}
        summary["baselines_pass1"] = {n: b.pass1() for n, b in baselines.items()}
        # Rates only: the token count is on another scale.
        comparison_png = plot_comparison(run_dir, [r for r in rows if "tokens" not in r["metric"]])
        console.print(f"plots: {training_png} {comparison_png}")
    else:
        console.print(f"plot: {training_png}")
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if history:
        last = history[-1]
        console.print(
            f"trained {len(history)} steps this call (to step {last['step']}, version "
            f"{last['version']}); generation {summary['generation_tokens_per_s']:.0f} tokens/s, "
            f"mean token lag {summary['token_lag_mean']:.2f}"
        )
    console.print(f"run directory: {run_dir} (metrics.jsonl, episodes/, checkpoints/, final/)")
    return 0
