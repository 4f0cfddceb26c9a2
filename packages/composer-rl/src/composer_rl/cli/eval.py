"""``composer-rl eval``: pass@1 / pass@k of a checkpoint on held-out tasks, the frozen bench
with its five side evals (``--suite bench``), or two checkpoints side by side
(``--compare A B``)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer_rl.errors import ConfigError, require_model_dir

if TYPE_CHECKING:
    from composer_rl.plugins import JobPlugins


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a checkpoint on the held-out split (pass@k, rewards, tokens)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=Path("runs/stage1/sft/final"),
        help="a model directory with tokenizer.json (default: the stage-one SFT result)",
    )
    parser.add_argument(
        "--suite",
        default="heldout",
        choices=["heldout", "bench"],
        help="heldout: the held-out split, sampled per template; bench: the frozen "
        "CursorBench-style set plus the five side evals (default: heldout)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="two checkpoints (or eval JSON reports) to run on the same tasks and print side "
        "by side, e.g. the SFT and the RL checkpoint; replaces --checkpoint",
    )
    parser.add_argument("--tasks", type=Path, help="task directory or JSONL instead of built-ins")
    parser.add_argument(
        "--split",
        default="heldout",
        choices=["heldout", "train"],
        help="split of --suite heldout (default: heldout)",
    )
    parser.add_argument(
        "--per-template",
        type=int,
        default=4,
        help="tasks per template for --suite heldout (0: all; default: 4)",
    )
    parser.add_argument("--samples", type=int, default=1, help="episodes per task (n)")
    parser.add_argument("--k", type=int, nargs="+", default=[1], help="k values for pass@k")
    parser.add_argument("--temperature", type=float, help="default: 0 for n=1, else 0.8")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16, help="episodes decoded together")
    parser.add_argument("--workers", type=int, default=4, help="sandboxes graded in parallel")
    parser.add_argument("--backend", help="sandbox backend (default: bwrap)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="JSON report (default: next to the checkpoint)")
    parser.add_argument(
        "--run-dir",
        type=Path,
        help="where plugins/ and metrics.jsonl go; `composer-rl plugins add|remove --run` "
        "changes a running evaluation's plugins between steps (default: the report's path "
        "without .json)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="TOML or JSON run config the reward/monitor plugins see: [plugins] (strict, "
        "block, plugins, hook_budget_s, over_budget), [rewards.<name>], [monitors.<name>]",
    )
    parser.add_argument(
        "--tasks-per-step", type=int, default=0, help="tasks per step (0: one decode batch)"
    )
    parser.set_defaults(handler=main)


def _tasks(args: argparse.Namespace, plugins: JobPlugins) -> tuple[str, list[Any]]:
    """(suite label, tasks) for the command line; a split's tasks include those of the
    job's plugin task sources."""
    from composer_rl.eval.bench import BENCH_VERSION, bench_tasks
    from composer_rl.eval.side import side_tasks
    from composer_rl.tasks import DirectoryTaskSource, Split, collect_tasks, sample_tasks

    if args.suite == "bench":
        if args.tasks:
            raise ConfigError("--suite bench is a fixed set; drop --tasks")
        return BENCH_VERSION, bench_tasks() + side_tasks()
    sources = [DirectoryTaskSource("user", args.tasks)] if args.tasks else None
    tasks = collect_tasks(Split(args.split), sources, pm=plugins.pm)
    if args.per_template:
        tasks = sample_tasks(tasks, args.per_template, seed=args.seed)
    if not tasks:
        raise ConfigError(f"no {args.split} tasks found")
    return args.split, tasks


def main(args: argparse.Namespace) -> int:
    from composer_rl.agent.episode import RunnerConfig
    from composer_rl.eval import EvalConfig, print_summary, run_eval, write_report
    from composer_rl.eval.evaluate import load_summary
    from composer_rl.eval.table import print_comparison
    from composer_rl.plugins import JobPlugins, PluginSession

    _check_args(args)
    plugin_config = _read_config(args.config) if args.config else {}
    try:  # a bad [plugins] section is reported before the model loads
        PluginSession.settings_of(plugin_config)
    except ValueError as error:
        raise ConfigError(f"--config {args.config}: {error}") from None

    bad_k = [k for k in args.k if k > args.samples]
    if bad_k:
        raise ConfigError(f"pass@k needs k <= --samples ({args.samples}); got {bad_k}")
    plugins = JobPlugins(plugin_config)  # the job's one manager, for every plugin kind
    suite, tasks = _tasks(args, plugins)
    temperature = (
        args.temperature if args.temperature is not None else (0.0 if args.samples == 1 else 0.8)
    )
    config = EvalConfig(
        samples=args.samples,
        k_values=tuple(sorted(set(args.k))),
        max_batch_size=args.batch,
        runner=RunnerConfig(
            max_turns=args.max_turns,
            max_new_tokens=args.max_new_tokens,
            temperature=temperature,
            seed=args.seed,
            backend=args.backend,
            grading_workers=args.workers,
        ),
        plugin_config=plugin_config,
        plugins=plugins,
        tasks_per_step=args.tasks_per_step,
        baselines=("do_nothing", "random"),  # scored on the same tasks, printed beside
    )

    def evaluate(checkpoint: Path, out: Path | None) -> dict[str, Any]:
        if checkpoint.is_file() and checkpoint.suffix == ".json":
            try:
                return load_summary(checkpoint)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        report = out or checkpoint.parent / f"eval_{suite}.json"
        # plugins/ and metrics.jsonl of this evaluation (`composer-rl plugins ... --run`).
        run_dir = args.run_dir if args.run_dir and not args.compare else report.with_suffix("")
        summary, results = run_eval(
            checkpoint, tasks, replace(config, run_dir=run_dir), threads=args.threads
        )
        summary["suite"] = suite
        write_report(summary, results, report)
        print(f"report: {report}")
        return summary

    if args.compare:
        a_path, b_path = args.compare
        a, b = evaluate(a_path, None), evaluate(b_path, None)
        if a.get("suite", "heldout") != b.get("suite", "heldout"):
            raise ConfigError(
                f"A was evaluated on {a.get('suite', 'heldout')!r} and B on "
                f"{b.get('suite', 'heldout')!r}; compare results of the same suite"
            )
        print_comparison(a, b, (str(a_path), str(b_path)))
        return 0
    summary = evaluate(args.checkpoint, args.out)
    print_summary(summary)
    return 0


def _check_args(args: argparse.Namespace) -> None:
    """The checks that need no model and no sandbox, made before either is loaded: a
    ConfigError naming the flag (one line, exit status 2)."""
    for flag, value, least in (
        ("--samples", args.samples, 1),
        ("--per-template", args.per_template, 0),
        ("--max-turns", args.max_turns, 1),
        ("--max-new-tokens", args.max_new_tokens, 1),
        ("--batch", args.batch, 1),
        ("--workers", args.workers, 1),
        ("--tasks-per-step", args.tasks_per_step, 0),
        ("--k", min(args.k), 1),
    ):
        if value < least:
            raise ConfigError(f"{flag} {value}: must be at least {least}")
    if args.tasks is not None and not args.tasks.exists():
        raise ConfigError(f"--tasks {args.tasks} does not exist: give a task directory or JSONL")
    if args.config is not None and not args.config.is_file():
        raise ConfigError(f"--config {args.config} does not exist")
    hint = "a model directory with tokenizer.json (e.g. runs/stage1/sft/final)"
    if args.compare:
        for path in args.compare:
            if not (path.is_file() and path.suffix == ".json"):
                require_model_dir(path, "--compare", hint + " or an eval JSON report")
    else:
        require_model_dir(args.checkpoint, "--checkpoint", hint)


def _read_config(path: Path) -> dict[str, Any]:
    """The plugin run config from a TOML or JSON file; a ConfigError naming the file if bad."""
    import json
    import tomllib

    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as error:
        raise ConfigError(f"--config {path}: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a table/object at the top level")
    return data
