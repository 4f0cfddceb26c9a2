"""``composer-rl tasks``: list, export and validate the task suite."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tasks", help="list, export or validate coding tasks")
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    show = sub.add_parser("list", help="count tasks per template, category and split")
    show.set_defaults(handler=list_tasks)
    export = sub.add_parser("export", help="write tasks as task directories or one JSONL file")
    export.add_argument("out", type=Path, help="a directory, or a file ending in .jsonl")
    export.add_argument("--split", default="heldout", choices=["heldout", "train"])
    export.add_argument("--per-template", type=int, default=0, help="0: all")
    export.set_defaults(handler=export_tasks)
    check = sub.add_parser(
        "validate", help="check that oracles pass and unsolved repositories fail (in sandboxes)"
    )
    check.add_argument("path", type=Path, nargs="?", help="tasks on disk (default: built-ins)")
    check.add_argument("--split", default="heldout", choices=["heldout", "train"])
    check.add_argument("--per-template", type=int, default=1)
    check.add_argument("--backend", help="sandbox backend (default: bwrap)")
    check.set_defaults(handler=validate_tasks)


def list_tasks(args: argparse.Namespace) -> int:
    from composer_rl.tasks import BUILTIN_TEMPLATES, Split

    table = Table(title="built-in task templates")
    for column in ("template", "category", "difficulty", "train", "heldout"):
        table.add_column(column)
    for t in BUILTIN_TEMPLATES:
        counts = Counter(s for s in (Split.TRAIN, Split.HELDOUT) for _ in t.tasks(s))
        table.add_row(
            t.name,
            t.category.value,
            str(t.difficulty),
            str(counts[Split.TRAIN]),
            str(counts[Split.HELDOUT]),
        )
    Console().print(table)
    return 0


def export_tasks(args: argparse.Namespace) -> int:
    from composer_rl.tasks import (
        Split,
        collect_tasks,
        sample_tasks,
        save_task_dir,
        save_tasks_jsonl,
    )

    tasks = collect_tasks(Split(args.split))
    if args.per_template:
        tasks = sample_tasks(tasks, args.per_template)
    if args.out.suffix == ".jsonl":
        save_tasks_jsonl(tasks, args.out)
    else:
        for task in tasks:
            save_task_dir(task, args.out / task.id)
    print(f"wrote {len(tasks)} tasks to {args.out}")
    return 0


def validate_tasks(args: argparse.Namespace) -> int:
    from composer_rl.agent.oracle import play_oracle
    from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox
    from composer_rl.tasks import Split, collect_tasks, load_tasks, sample_tasks

    if args.path:
        tasks = load_tasks(args.path)
    else:
        tasks = sample_tasks(collect_tasks(Split(args.split)), args.per_template)
    bad = 0
    for task in tasks:
        demo = play_oracle(task, backend=args.backend)
        with open_sandbox(task, args.backend) as sandbox:
            unsolved = grade_sandbox(sandbox, task)
        ok = demo.solved and not unsolved.all_passed
        bad += not ok
        status = "ok" if ok else ("oracle fails" if not demo.solved else "unsolved passes")
        print(f"{task.id}: {status}")
    print(f"{len(tasks) - bad}/{len(tasks)} tasks valid")
    return 1 if bad else 0
