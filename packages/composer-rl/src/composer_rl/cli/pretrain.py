"""``composer-rl pretrain``: continued pretraining, then the long-context phase."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console

from composer_rl.cli._stage_args import (
    add_common,
    add_parallel,
    add_phase,
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
            "with YaRN. Finished phases are reused; a killed phase resumes."
        ),
    )
    add_common(parser)
    add_parallel(parser)
    parser.add_argument("--corpus", type=Path, help="directory of text files or a .jsonl file")
    parser.add_argument(
        "--skip-long-context", action="store_true", help="stop after the base phase"
    )
    add_phase(parser, "pretrain", "base phase")
    add_phase(parser, "long_context", "long-context phase")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from composer_rl.stages.pretrain import run_long_context, run_pretrain

    # Mark the run directory before anything can fail (one writer: torchrun's rank 0), so a
    # plugin request on it is refused with the reason even when the command stops early.
    if int(os.environ.get("RANK", "0")) == 0:
        refuse_plugins(args.run_dir, "pretrain")
    config = stage1_config(args)
    if config.parallel.world_size > 1 and not args.skip_long_context:
        raise SystemExit(
            "--dp/--cp above 1 run the base phase only (the long-context phase is not parallel "
            "yet): add --skip-long-context, then run the long-context phase in one process"
        )
    from composer_parallel import init_distributed

    distributed = init_distributed()
    if distributed and _world() != config.parallel.world_size:
        raise SystemExit(
            f"this launch has {_world()} processes but --dp {config.parallel.dp} x --cp "
            f"{config.parallel.cp} = {config.parallel.world_size}: give --dp/--cp whose "
            "product is torchrun's --nproc-per-node (x nodes)"
        )
    main_rank = not distributed or _rank() == 0
    console = Console()
    summary = run_pretrain(config, show_progress=not args.no_progress)
    if main_rank:
        console.print_json(json.dumps(summary))
    if distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
        return 0
    if not args.skip_long_context:
        summary = run_long_context(config, show_progress=not args.no_progress)
        console.print_json(json.dumps(summary))
    return 0


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size()
