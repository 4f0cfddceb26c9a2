"""``composer-rl eval``: pass@1 / pass@k of a checkpoint on held-out tasks."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


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
    parser.add_argument("--tasks", type=Path, help="task directory or JSONL instead of built-ins")
    parser.add_argument("--split", default="heldout", choices=["heldout", "train"])
    parser.add_argument("--per-template", type=int, default=4, help="tasks per template (0: all)")
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


def main(args: argparse.Namespace) -> int:
    from composer_rl.agent.episode import RunnerConfig
    from composer_rl.eval import EvalConfig, print_summary, run_eval, write_report
    from composer_rl.plugins import PluginSession
    from composer_rl.tasks import DirectoryTaskSource, Split, collect_tasks, sample_tasks

    plugin_config = _read_config(args.config) if args.config else {}
    try:  # a bad [plugins] section is reported before the model loads
        PluginSession.settings_of(plugin_config)
    except ValueError as error:
        raise SystemExit(f"error: --config {args.config}: {error}") from None

    bad_k = [k for k in args.k if k > args.samples]
    if bad_k:
        raise SystemExit(f"error: pass@k needs k <= --samples ({args.samples}); got {bad_k}")
    sources = [DirectoryTaskSource("user", args.tasks)] if args.tasks else None
    tasks = collect_tasks(Split(args.split), sources=sources)
    if args.per_template:
        tasks = sample_tasks(tasks, args.per_template, seed=args.seed)
    if not tasks:
        raise SystemExit(f"error: no {args.split} tasks found")
    temperature = (
        args.temperature if args.temperature is not None else (0.0 if args.samples == 1 else 0.8)
    )
    out = args.out or args.checkpoint.parent / f"eval_{args.split}.json"
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
        run_dir=args.run_dir or out.with_suffix(""),
        tasks_per_step=args.tasks_per_step,
    )
    summary, results = run_eval(args.checkpoint, tasks, config, threads=args.threads)
    print_summary(summary)
    write_report(summary, results, out)
    print(f"report: {out}")
    return 0


def _read_config(path: Path) -> dict[str, Any]:
    """The plugin run config from a TOML or JSON file; SystemExit naming the file if bad."""
    import json
    import tomllib

    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: --config {path}: {error}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: --config {path}: expected a table/object at the top level")
    return data
