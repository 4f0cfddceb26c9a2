"""Command-line options shared by the stage commands (pretrain, sft, stage1)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from composer_rl.errors import ConfigError
from composer_rl.progress import Show
from composer_rl.stages.config import Stage1Config, load_stage1_config


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", type=Path, default=Path("runs/stage1"), help="run directory")
    parser.add_argument("--config", type=Path, help="JSON file with Stage1Config fields")
    parser.add_argument("--preset", help="model preset (default: tiny)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="plain progress lines instead of bars (what a log file or a pipe gets anyway): "
        "one when a phase starts and ends, and one every 30 s or tenth of the phase",
    )


def add_parallel(parser: argparse.ArgumentParser) -> None:
    """--dp/--cp/--ep: run under torchrun with dp x cp processes (see the README)."""
    group = parser.add_argument_group(
        "parallelism",
        "launch with `uv run python -m torch.distributed.run --nproc-per-node DPxCP -m composer_rl.cli "
        "...`; gloo on CPU, NCCL on GPUs; rank 0 writes metrics and checkpoints",
    )
    group.add_argument("--dp", dest="parallel.dp", type=int, help="data-parallel degree")
    group.add_argument("--cp", dest="parallel.cp", type=int, help="context-parallel degree")
    group.add_argument(
        "--ep", dest="parallel.ep", type=int, help="expert-parallel degree (divides dp x cp)"
    )
    group.add_argument(
        "--cp-mode", dest="parallel.cp_mode", choices=("allgather", "ring"), help="CP attention"
    )


def add_phase(parser: argparse.ArgumentParser, phase: str, label: str) -> None:
    group = parser.add_argument_group(label)
    flag = phase.replace("_", "-")
    group.add_argument(f"--{flag}-steps", dest=f"{phase}.steps", type=int)
    group.add_argument(f"--{flag}-seq-len", dest=f"{phase}.seq_len", type=int)
    group.add_argument(f"--{flag}-rows", dest=f"{phase}.rows_per_step", type=int)
    group.add_argument(f"--{flag}-lr", dest=f"{phase}.optim.lr", type=float)
    group.add_argument(
        f"--{flag}-time-limit",
        dest=f"{phase}.time_limit_s",
        type=float,
        metavar="SECONDS",
        help="opt-in wall-clock budget: stop the phase after the checkpoint of the step "
        "that crosses it (default: none, the phase runs all its steps, so the result does "
        "not depend on how busy the machine is)",
    )


def add_copy_warmup(parser: argparse.ArgumentParser) -> None:
    """--copy-warmup-steps N: the copy warm-up before pretraining (`Stage1Config.copy_warmup`)."""
    group = parser.add_argument_group(
        "copy warm-up", "stretches of the corpus written twice, before pretraining (off: 0)"
    )
    group.add_argument("--copy-warmup-steps", dest="copy_warmup.steps", type=int, metavar="N")
    group.add_argument("--copy-warmup-lr", dest="copy_warmup.lr", type=float)
    group.add_argument(
        "--copy-pretrain-share",
        dest="copy_warmup.pretrain_share",
        type=float,
        metavar="SHARE",
        help="share of pretraining's rows that are repeated stretches too (default 0)",
    )


def add_demonstrations(parser: argparse.ArgumentParser) -> None:
    """--demo-<behaviour> SHARE and --demo-seed: the SFT demonstrations' mix of behaviours
    (`Stage1Config.demonstrations`; shares are normalised by their sum)."""
    from composer_rl.agent.behaviours import Behaviour, DemonstrationMix

    defaults = DemonstrationMix()

    group = parser.add_argument_group(
        "SFT demonstrations",
        "shares of the behaviours the SFT demonstrations show (normalised by their sum; "
        "defaults: composer_rl.agent.behaviours)",
    )
    for behaviour in Behaviour:
        flag = behaviour.value.replace("_", "-")
        group.add_argument(
            f"--demo-{flag}",
            dest=f"demonstrations.{behaviour.value}",
            type=float,
            metavar="SHARE",
            help=f"default {getattr(defaults, behaviour.value)}",
        )
    group.add_argument(
        "--demo-careless-wrong",
        dest="demonstrations.careless_wrong",
        type=float,
        metavar="SHARE",
        help="share of careless demonstrations whose edit is wrong "
        f"(default {defaults.careless_wrong})",
    )
    group.add_argument(
        "--demo-seed",
        dest="demonstrations.seed",
        type=int,
        metavar="N",
        help="seed of each task's behaviour and mistake (default 0)",
    )


def add_round2(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The second SFT round's settings (`Stage1Config.sft_round2`): `--tasks` etc. on
    `composer-rl sft-round2`, `--round2-tasks` etc. (prefix "round2-") on `stage1`."""
    from composer_rl.stages.config import SftRound2Config

    defaults = SftRound2Config()
    group = parser.add_argument_group(
        "second SFT round",
        "recovering demonstrations from the SFT policy's own failed attempts on training "
        "tasks, mixed into round one's (off unless the task count is above 0)",
    )
    dest = "sft_round2."
    options: list[tuple[str, str, type, str, str]] = [
        ("tasks", "tasks", int, "N", "training tasks the SFT policy attempts (0: no round)"),
        ("samples", "samples", int, "K", f"episodes per task (default {defaults.samples})"),
        ("temperature", "temperature", float, "T", "sampling temperature (default 1)"),
        ("share", "share", float, "SHARE", f"share of own-mistake rows ({defaults.share})"),
        ("steps", "phase.steps", int, "S", f"SFT steps (default {defaults.phase.steps})"),
        ("lr", "phase.optim.lr", float, "LR", f"peak lr (default {defaults.phase.optim.lr})"),
        ("rows", "phase.rows_per_step", int, "R", "rows per step (default 1)"),
        ("max-turns", "max_turns", int, "N", f"calls an episode may make ({defaults.max_turns})"),
        ("seed", "seed", int, "N", "which tasks, and the episodes' sampling (default 0)"),
    ]
    for flag, key, kind, metavar, text in options:
        group.add_argument(
            f"--{prefix}{flag}", dest=dest + key, type=kind, metavar=metavar, help=text
        )
    group.add_argument(
        f"--{prefix}templates",
        dest=dest + "templates",
        nargs="+",
        metavar="NAME",
        help="only these templates' tasks (default: all)",
    )
    group.add_argument(
        f"--{prefix}source",
        dest=dest + "source",
        type=Path,
        metavar="DIR",
        help="the SFT checkpoint to continue (default: RUN/sft/final)",
    )
    group.add_argument(
        f"--{prefix}time-limit",
        dest=dest + "phase.time_limit_s",
        type=float,
        metavar="SECONDS",
        help="opt-in wall-clock budget for the training steps (default: none)",
    )


def progress(args: argparse.Namespace) -> Show:
    """The phases' progress reporting for --no-progress (see `composer_rl.progress`)."""
    return "lines" if args.no_progress else True


def stage1_config(args: argparse.Namespace) -> Stage1Config:
    overrides = {k: v for k, v in vars(args).items() if "." in k or k in ("preset", "threads")}
    overrides["run_dir"] = args.run_dir
    if getattr(args, "corpus", None) is not None:
        overrides["corpus.path"] = args.corpus
    return load_stage1_config(args.config, **overrides)


def preflight(config: Stage1Config, command: str, *, long_context: bool = True) -> None:
    """Every check of a stage command's settings that needs nothing started: a ConfigError
    naming what to change, raised before the corpus is read, a phase starts or the run
    directory is written (the CLI prints it as one line and exits with 2).

    `long_context`: whether this command runs the long-context phase after the base one."""
    from composer_model import PRESETS
    from composer_parallel import ParallelDims

    if config.preset not in PRESETS:
        raise ConfigError(f"--preset {config.preset!r}: choose one of {', '.join(sorted(PRESETS))}")
    corpus = config.corpus.path
    if corpus is not None and not (
        corpus.is_dir() or (corpus.is_file() and corpus.suffix == ".jsonl")
    ):
        what = (
            "does not exist" if not corpus.exists() else "is neither a directory nor a .jsonl file"
        )
        raise ConfigError(
            f"--corpus {corpus} {what}: give a directory of text files or a .jsonl file of "
            '{"text": ...} records (or leave it out for the Python standard library)'
        )
    parallel = config.parallel
    try:
        ParallelDims(dp=parallel.dp, cp=parallel.cp, ep=parallel.ep)
    except ValueError as error:
        raise ConfigError(f"--ep: {error}") from None
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
            "--dp/--cp above 1 run the base phase only (the long-context phase is not parallel "
            "yet): add --skip-long-context, then run the long-context phase in one process"
        )
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        raise ConfigError(
            f"--dp {parallel.dp} x --cp {parallel.cp} needs {parallel.world_size} processes: "
            f"launch with `uv run python -m torch.distributed.run --nproc-per-node "
            f"{parallel.world_size} -m composer_rl.cli pretrain ...` (see composer-parallel's "
            "README), or drop --dp/--cp to run in one process"
        )
    if int(world) != parallel.world_size:
        raise ConfigError(
            f"this launch has {world} processes but --dp {parallel.dp} x --cp {parallel.cp} = "
            f"{parallel.world_size}: give --dp/--cp whose product is torchrun's "
            "--nproc-per-node (x nodes)"
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
