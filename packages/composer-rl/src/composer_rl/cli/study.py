"""``composer-rl study NAME``: rerun one of the report's claims at tiny scale.

Writes table.md, plot.png and result.json (verdict and wall-clock) into the run directory
and prints the table. ``--list`` shows every study with its claim and whether it has code
yet; a study without code says so and exits 2 instead of printing a result.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from composer_rl.errors import ConfigError, require_model_dir


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "study",
        help="rerun a claim of the Composer 2 report at tiny scale: table, plot and verdict",
        description="Run one study: writes table.md, plot.png and result.json into "
        "runs/studies/NAME (or --out) and prints the table with the verdict.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="the study (see --list)")
    parser.add_argument("--list", action="store_true", help="list the studies and their claims")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: under 3 minutes on 2 cores"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        help="run directory (default: runs/studies/NAME, or runs/studies/NAME-quick)",
    )
    parser.add_argument(
        "--run-dir-of-rl",
        type=Path,
        default=Path("runs/rl"),
        help="kl-estimators: an RL run directory whose metrics.jsonl (kl_k1, kl_k3 per step) "
        "is drawn beside the controlled pairs; skipped with a message if absent "
        "(default: runs/rl)",
    )
    parser.add_argument(
        "--checkpoint",
        "--model",
        dest="checkpoint",
        type=Path,
        help="nvfp4-invariance, router-replay, async, length-penalty, self-summary, behaviour-reward: a model directory (with its "
        "tokenizer.json; the stage-one SFT checkpoint for async, length-penalty, self-summary and behaviour-reward) instead of the randomly "
        "initialised tiny preset",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="length-penalty, cpt-vs-rl, behaviour-reward: keep the runs of its variants here, and "
        "reuse the finished ones on a rerun; self-summary: the same for its variants' episodes "
        "(default: a temporary directory, deleted at the end)",
    )
    parser.add_argument(
        "--behaviour",
        metavar="NAME",
        help="behaviour-reward: the behaviour watched, with its monitor and matching reward: "
        "reread (a file read again for nothing; redundant_reads), todo_left (a TODO added; "
        "unfinished) or failed_read_again (a missing file read again; the optional "
        "failed_reads_again) (default: reread)",
    )
    parser.add_argument("--threads", type=int, help="torch intra-op threads")
    parser.set_defaults(handler=main)


def _list() -> int:
    from composer_rl.studies import STUDIES

    width = max(len(name) for name in STUDIES)
    for study in STUDIES.values():
        state = "ready" if study.implemented else study.missing
        print(f"{study.name:<{width}}  {study.claim}")
        print(f"{'':<{width}}  [{state}]")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if not args.name:
        print("composer-rl study: name a study or pass --list", file=sys.stderr)
        return 2
    import torch

    from composer_rl.studies import StudyNotImplemented, StudyOptions, get_study, run_study
    from composer_rl.studies.runner import command_line

    try:
        study = get_study(args.name)
    except KeyError as error:
        print(f"composer-rl study: {error.args[0]}", file=sys.stderr)
        return 2
    if not study.implemented:
        print(f"composer-rl study {study.name}: {study.missing}", file=sys.stderr)
        return 2
    if args.checkpoint is not None:
        hint = "a model directory with tokenizer.json (e.g. runs/stage1/sft/final)"
        require_model_dir(args.checkpoint, "--checkpoint", hint)
    if args.behaviour is not None and study.name != "behaviour-reward":
        print(
            f"composer-rl study {study.name}: --behaviour is an option of behaviour-reward only",
            file=sys.stderr,
        )
        return 2
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads}: must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        options = StudyOptions(
            quick=args.quick,
            seed=args.seed,
            rl_run_dir=args.run_dir_of_rl,
            checkpoint=args.checkpoint,
            work_dir=args.work_dir,
            **({"behaviour": args.behaviour} if args.behaviour is not None else {}),
        )
    except ValueError as error:  # StudyOptions validates the study settings
        raise ConfigError(f"--behaviour {args.behaviour}: {error}") from error
    out = args.out or Path("runs/studies") / (study.name + ("-quick" if args.quick else ""))
    argv = ["study", study.name] + (["--quick"] if args.quick else [])
    if args.seed:
        argv += ["--seed", str(args.seed)]
    if args.checkpoint:
        argv += ["--checkpoint", str(args.checkpoint)]
    if args.out:
        argv += ["--out", str(args.out)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.work_dir:
        argv += ["--work-dir", str(args.work_dir)]
    if args.behaviour is not None:
        argv += ["--behaviour", args.behaviour]
    if study.name == "kl-estimators" and args.run_dir_of_rl != Path("runs/rl"):
        argv += ["--run-dir-of-rl", str(args.run_dir_of_rl)]
    try:
        result = run_study(study, options, out, command=command_line(argv))
    except StudyNotImplemented as error:
        print(f"composer-rl study: {error}", file=sys.stderr)
        return 2
    print(result.table_path.read_text())
    print(f"wrote {result.table_path}, {result.plot_path}, {result.result_path}")
    return 0
