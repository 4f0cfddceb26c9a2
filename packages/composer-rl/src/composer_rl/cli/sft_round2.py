"""``composer-rl sft-round2``: a second SFT round from the SFT policy's own mistakes."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from composer_rl.cli._stage_args import (
    add_stage_flags,
    preflight,
    progress,
    refuse_plugins,
    stage1_config,
)
from composer_rl.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sft-round2",
        help="continue SFT with recovering demonstrations from the SFT policy's own failed "
        "attempts on training tasks (after sft)",
        description=(
            "Recovering demonstrations from the SFT policy's own failed attempts on training "
            "tasks, mixed into round one's, from the SFT phase's model in the same run "
            "directory. Settings: flags (--section.field, e.g. --sft-round2.tasks 200) over a "
            "TOML file (--config, the one stage1, pretrain and sft read; its [sft_round2] "
            "table) over the defaults."
        ),
    )
    add_stage_flags(parser, ("run_dir", "preset", "threads", "device", "sft_round2"))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from composer_rl.stages.phases import read_result
    from composer_rl.stages.sft_round2 import NoOwnMistakes, check_round2_inputs, run_sft_round2

    config = stage1_config(args)
    preflight(config, "sft-round2")
    settings = config.sft_round2
    if read_result(config.run_dir / settings.phase.name) is None:
        if settings.tasks < 1:
            raise ConfigError(
                f"sft_round2.tasks {settings.tasks}: give how many training tasks the SFT "
                "policy attempts (at least 1), e.g. --sft-round2.tasks 200"
            )
        check_round2_inputs(config)
    refuse_plugins(config.run_dir, "sft-round2")
    try:
        summary = run_sft_round2(config, show_progress=progress(args))
    except NoOwnMistakes as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    Console().print_json(json.dumps(summary))
    return 0
