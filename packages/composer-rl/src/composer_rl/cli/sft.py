"""``composer-rl sft``: supervised fine-tuning on the task suite's oracle demonstrations."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from composer_rl.cli._stage_args import (
    add_stage_flags,
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
        description=(
            "SFT on demonstrations of the training split, from the long-context phase's "
            "model in the same run directory. Settings: flags (--section.field) over a TOML "
            "file (--config, the one stage1 and pretrain read) over the defaults."
        ),
    )
    add_stage_flags(parser, ("run_dir", "preset", "threads", "device", "sft"))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from composer_rl.stages.phases import read_result
    from composer_rl.stages.sft import run_sft

    config = stage1_config(args)
    preflight(config, "sft")
    if read_result(config.run_dir / config.sft.name) is None:
        require_phase(
            config.run_dir,
            config.long_context.name,
            "run the pretrain and long-context phases first (`uv run composer-rl pretrain "
            f"--run-dir {config.run_dir}`), or give the --run-dir of a run that has them",
        )
    refuse_plugins(config.run_dir, "sft")
    summary = run_sft(config, show_progress=progress(args))
    Console().print_json(json.dumps(summary))
    return 0
