"""Command-line options shared by the stage commands (pretrain, sft, sft-round2, stage1): one
configuration, `Stage1Config`, read from one TOML file and ``--section.field`` flags
(`composer_rl.config`), and the checks made before anything starts."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from composer_rl.config import add_flags, load_args
from composer_rl.errors import ConfigError
from composer_rl.progress import Show
from composer_rl.stages.config import Stage1Config

STAGE1_SECTIONS = ("run_dir", "preset", "threads", "device", "corpus", "copy_warmup")
"""The top-level keys every stage command that pretrains shows flags for."""


def add_stage_flags(
    parser: argparse.ArgumentParser, only: tuple[str, ...], *, progress: bool = True
) -> None:
    """`--config FILE` (the TOML all three stage commands read: `Stage1Config`), one
    ``--section.field`` flag per knob of the sections in `only`, and --no-progress."""
    add_flags(
        parser,
        Stage1Config,
        only=only,
        config_help="a TOML file (or .json) of Stage1Config settings, one file for stage1, "
        "pretrain, sft and sft-round2: [pretrain], [long_context], [sft], [sft_round2], "
        "[corpus], ... tables; flags "
        "given on the command line win over it, and it over the defaults",
    )
    if progress:
        parser.add_argument(
            "--no-progress",
            action="store_true",
            help="plain progress lines instead of bars (what a log file or a pipe gets "
            "anyway): one when a phase starts and ends, and one every 30 s or tenth of the "
            "phase",
        )


def progress(args: argparse.Namespace) -> Show:
    """The phases' progress reporting for --no-progress (see `composer_rl.progress`)."""
    return "lines" if args.no_progress else True


def stage1_config(args: argparse.Namespace) -> Stage1Config:
    """The stage command's configuration: defaults < the --config file < flags given."""
    return load_args(Stage1Config, args)


def preflight(config: Stage1Config, command: str, *, long_context: bool = True) -> None:
    """Every check of a stage command's settings that needs nothing started: a ConfigError
    naming what to change, raised before the corpus is read, a phase starts or the run
    directory is written (the CLI prints it as one line and exits with 2).

    `long_context`: whether this command runs the long-context phase after the base one."""
    from composer_model import PRESETS
    from composer_parallel import ParallelDims

    if config.preset not in PRESETS:
        raise ConfigError(f"preset {config.preset!r}: choose one of {', '.join(sorted(PRESETS))}")
    corpus = config.corpus.path
    if corpus is not None and not (
        corpus.is_dir() or (corpus.is_file() and corpus.suffix == ".jsonl")
    ):
        what = (
            "does not exist" if not corpus.exists() else "is neither a directory nor a .jsonl file"
        )
        raise ConfigError(
            f"corpus.path {corpus} {what}: give a directory of text files or a .jsonl file of "
            '{"text": ...} records (or leave it out for the Python standard library)'
        )
    parallel = config.parallel
    try:
        ParallelDims(dp=parallel.dp, cp=parallel.cp, ep=parallel.ep)
    except ValueError as error:
        raise ConfigError(f"parallel.ep: {error}") from None
    if parallel.world_size > 1 and config.device != "cpu":
        raise ConfigError(
            f"device {config.device} with parallel.dp {parallel.dp} x parallel.cp {parallel.cp}: "
            'stage one\'s parallel phases run on CPU (gloo) only; give device = "cpu", or '
            "train on one GPU without --dp/--cp"
        )
    check_device(config.device)
    if parallel.world_size == 1:
        return
    if command != "pretrain":
        raise ConfigError(
            f"parallel.dp {parallel.dp} x parallel.cp {parallel.cp}: only `composer-rl pretrain` "
            "runs in parallel (its base phase); set parallel back to 1 for "
            f"`composer-rl {command}`"
        )
    if long_context:
        raise ConfigError(
            "parallel.dp/cp above 1 run the base phase only (the long-context phase is not parallel "
            "yet): add --skip-long-context, then run the long-context phase in one process"
        )
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        raise ConfigError(
            f"parallel.dp {parallel.dp} x parallel.cp {parallel.cp} needs {parallel.world_size} "
            "processes: "
            f"launch with `uv run python -m torch.distributed.run --nproc-per-node "
            f"{parallel.world_size} -m composer_rl.cli pretrain ...` (see composer-parallel's "
            "README), or drop --dp/--cp (parallel.dp/cp) to run in one process"
        )
    if int(world) != parallel.world_size:
        raise ConfigError(
            f"this launch has {world} processes but parallel.dp {parallel.dp} x parallel.cp "
            f"{parallel.cp} = {parallel.world_size}: give --dp/--cp whose product is torchrun's "
            "--nproc-per-node (x nodes)"
        )


def check_device(device: str) -> None:
    """A ConfigError unless torch can train on `device` here (a GPU asked of a machine
    without one would otherwise fail inside the first phase, after the corpus is read)."""
    import torch

    wanted = torch.device(device)
    if wanted.type != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(
            f'device {device}: torch sees no CUDA device on this machine; give device = "cpu"'
        )
    if wanted.index is not None and wanted.index >= count:
        raise ConfigError(
            f"device {device}: this machine has {count} CUDA device(s), cuda:0 to "
            f"cuda:{count - 1}; give one of them"
        )


def require_phase(run_dir: Path, phase: str, hint: str) -> None:
    """A ConfigError unless the phase `phase` of `run_dir` has finished (its final model)."""
    from composer_rl.stages.phases import final_dir

    source = final_dir(run_dir / phase)
    if not (source / "config.json").is_file():
        raise ConfigError(f"{source} does not exist: {hint}")


def refuse_plugins(run_dir: Path, command: str) -> None:
    """Mark `run_dir` as taking no plugin requests: the stage commands score no episodes.

    Without this, `composer-rl plugins add --run` on a stage run directory queued requests
    that nothing would ever apply.
    """
    from composer_rl.plugins import refuse_plugin_requests

    refuse_plugin_requests(
        run_dir,
        command,
        f"`composer-rl {command}` scores no episodes and runs no reward or monitor plugins, "
        "so it takes no plugin requests; plugins apply to `composer-rl eval` (its --run-dir) "
        "and the RL run",
    )
