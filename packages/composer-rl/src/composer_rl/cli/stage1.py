"""``composer-rl stage1``: the whole default stage one (pretrain, long context, SFT, and the
opt-in second SFT round, `--sft-round2.tasks N`, also `--round2-tasks N`)."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from composer_rl.cli._stage_args import (
    STAGE1_SECTIONS,
    add_stage_flags,
    preflight,
    progress,
    refuse_plugins,
    stage1_config,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stage1",
        help="pretrain + long context + SFT with the defaults (reuses finished phases)",
        description=(
            "Runs the three stage-one phases in order (and the second SFT round when "
            "sft_round2.tasks is above 0), each resumable and reused once finished. Every "
            "setting is a flag (--section.field) or a key of a TOML file given with --config "
            "(the file `composer-rl pretrain`, `sft` and `sft-round2` read too); flags "
            "win over the file, the file over the defaults."
        ),
    )
    add_stage_flags(parser, (*STAGE1_SECTIONS, "pretrain", "long_context", "sft", "sft_round2"))
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from composer_rl.stages.pretrain import run_long_context, run_pretrain
    from composer_rl.stages.sft import run_sft
    from composer_rl.stages.sft_round2 import NoOwnMistakes, run_sft_round2, templates_named

    config = stage1_config(args)
    preflight(config, "stage1")
    round2 = config.sft_round2.tasks > 0
    if round2:
        templates_named(config.sft_round2.templates)
    refuse_plugins(config.run_dir, "stage1")
    show = progress(args)
    summaries = [
        run_pretrain(config, show),
        run_long_context(config, show),
        run_sft(config, show),
    ]
    if round2:
        try:
            summaries.append(run_sft_round2(config, show))
        except NoOwnMistakes as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    table = Table(title=f"stage one in {config.run_dir}")
    for column in ("phase", "steps", "seconds", "held-out CE", "MTP acceptance"):
        table.add_column(column)
    for s in summaries:
        acceptance = s.get("mtp_acceptance")
        table.add_row(
            s["phase"],
            str(s["steps"]),
            f"{s['seconds']:.0f}",
            f"{s.get('heldout_ce', float('nan')):.3f}",
            f"{acceptance:.3f}" if acceptance is not None else "-",
        )
    Console().print(table)
    out = config.run_dir / "stage1.json"
    out.write_text(json.dumps(summaries, indent=2) + "\n")
    return 0
