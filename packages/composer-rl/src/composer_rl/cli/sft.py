"""``composer-rl sft``: supervised fine-tuning on the task suite's oracle demonstrations."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from composer_rl.cli._stage_args import (
    add_common,
    add_demonstrations,
    add_phase,
    preflight,
    progress,
    refuse_plugins,
    require_phase,
    stage1_config,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sft",
        help="SFT on oracle trajectories of the training split (after pretrain)",
    )
    add_common(parser)
    parser.add_argument("--max-tasks", dest="sft_max_tasks", type=int, help="demonstrations")
    add_phase(parser, "sft", "SFT phase")
    add_demonstrations(parser)
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from composer_rl.stages.phases import read_result
    from composer_rl.stages.sft import run_sft

    config = stage1_config(args)
    if args.sft_max_tasks:
        config = config.model_copy(update={"sft_max_tasks": args.sft_max_tasks})
    preflight(config, "sft")
    if read_result(config.run_dir / config.sft.name) is None:
        require_phase(
            config.run_dir,
            config.long_context.name,
            "run the pretrain and long-context phases first (`uv run composer-rl pretrain "
            f"--run-dir {config.run_dir}`), or give the --run-dir of a run that has them",
        )
    refuse_plugins(args.run_dir, "sft")
    summary = run_sft(config, show_progress=progress(args))
    Console().print_json(json.dumps(summary))
    return 0
