"""``composer-rl pretrain``: continued pretraining, then the long-context phase."""

from __future__ import annotations

import argparse
import json
import os

from rich.console import Console

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
        "pretrain",
        help="next-token pretraining on a code corpus, then the long-context phase",
        description=(
            "Pretrain the policy on a corpus (default: this machine's Python standard "
            "library), with MTP joining mid-run, then continue at a longer sequence length "
            "with YaRN. Finished phases are reused; a killed phase resumes. Settings: flags "
            "(--section.field) over a TOML file (--config, the one stage1 and sft read) over "
            "the defaults. [parallel] (--dp, --cp, --ep) runs the base phase under torchrun: "
            "launch with `uv run python -m torch.distributed.run --nproc-per-node DPxCP -m "
            "composer_rl.cli pretrain ...`; its ranks train on CPU over gloo (device = cuda "
            "trains one process on a GPU); rank 0 writes metrics and checkpoints."
        ),
    )
    add_stage_flags(parser, (*STAGE1_SECTIONS, "pretrain", "long_context", "parallel"))
    parser.add_argument(
        "--skip-long-context", action="store_true", help="stop after the base phase"
    )
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from composer_rl.stages.pretrain import run_long_context, run_pretrain

    config = stage1_config(args)
    # Settings and the launch are checked before the corpus is read or anything is written.
    preflight(config, "pretrain", long_context=not args.skip_long_context)
    # Then the run directory is marked (one writer: torchrun's rank 0), so that a plugin
    # request on it is refused with the reason even when the command stops later.
    if int(os.environ.get("RANK", "0")) == 0:
        refuse_plugins(config.run_dir, "pretrain")
    from composer_parallel import init_distributed

    distributed = init_distributed("gloo")  # stage one's parallel phases run on CPU
    main_rank = not distributed or _rank() == 0
    console = Console()
    summary = run_pretrain(config, show_progress=progress(args))
    if main_rank:
        console.print_json(json.dumps(summary))
    if distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
        return 0
    if not args.skip_long_context:
        summary = run_long_context(config, show_progress=progress(args))
        console.print_json(json.dumps(summary))
    return 0


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()
