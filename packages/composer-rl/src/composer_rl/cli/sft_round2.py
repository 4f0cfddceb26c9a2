"""``composer-rl sft-round2``: a second SFT round from the SFT policy's own mistakes."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from composer_rl.cli._stage_args import (
    add_common,
    add_round2,
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
    )
    add_common(parser)
    add_round2(parser)
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
                f"--tasks {settings.tasks}: give how many training tasks the SFT policy "
                "attempts (at least 1), e.g. --tasks 200"
            )
        check_round2_inputs(config)
    refuse_plugins(args.run_dir, "sft-round2")
    try:
        summary = run_sft_round2(config, show_progress=progress(args))
    except NoOwnMistakes as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    Console().print_json(json.dumps(summary))
    return 0
