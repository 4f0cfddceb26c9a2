"""``composer-rl tasks``: list, export and validate the task suite."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from composer_rl.errors import ConfigError
from composer_rl.progress import StepProgress


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tasks", help="list, export or validate coding tasks")
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    show = sub.add_parser("list", help="count tasks per template, category and split")
    show.set_defaults(handler=list_tasks)
    export = sub.add_parser("export", help="write tasks as task directories or one JSONL file")
    export.add_argument("out", type=Path, help="a directory, or a file ending in .jsonl")
    export.add_argument(
        "--split",
        default="heldout",
        choices=["heldout", "train"],
        help="which split to write (default: heldout)",
    )
    export.add_argument(
        "--per-template", type=int, default=0, help="tasks per template (default 0: all)"
    )
    export.set_defaults(handler=export_tasks)
    check = sub.add_parser(
        "validate", help="check that oracles pass and unsolved repositories fail (in sandboxes)"
    )
    check.add_argument("path", type=Path, nargs="?", help="tasks on disk (default: built-ins)")
    check.add_argument(
        "--split",
        default="heldout",
        choices=["heldout", "train"],
        help="split of the built-ins to check (default: heldout)",
    )
    check.add_argument(
        "--per-template", type=int, default=1, help="built-in tasks per template (default: 1)"
    )
    check.add_argument("--backend", help="sandbox backend (default: bwrap)")
    check.set_defaults(handler=validate_tasks)


def list_tasks(args: argparse.Namespace) -> int:
    """Per template: category, difficulty, split sizes and the median size of its tasks;
    then per category the medians of changed lines and description length (both splits),
    the two axes on which CursorBench differs from public benchmarks."""
    from composer_rl.tasks import BUILTIN_TEMPLATES, Split
    from composer_rl.tasks.stats import medians, medians_by_category

    # Template and category names are never cut: the console widens to hold them (off a
    # terminal rich assumes 80 columns and ended them with an ellipsis).
    names = max(len(t.name) for t in BUILTIN_TEMPLATES)
    categories = max(len(t.category.value) for t in BUILTIN_TEMPLATES)
    console = Console(width=max(Console().width, names + categories + 5 * 12 + 8))
    table = Table(title="built-in task templates")
    for column in ("template", "category", "difficulty", "train", "heldout", "lines", "chars"):
        if column in ("template", "category"):
            width = names if column == "template" else categories
            table.add_column(column, min_width=width, no_wrap=True)
        else:
            table.add_column(column, justify="right")
    everything = []
    totals = Counter[str]()
    # Building every task of both splits takes from half a minute to minutes: progress goes
    # to stderr (lines when it is no terminal), so the table on stdout stays what it was.
    with StepProgress(
        "tasks list", len(BUILTIN_TEMPLATES), unit="templates", stream=sys.stderr
    ) as progress:
        for t in BUILTIN_TEMPLATES:
            train, heldout = list(t.tasks(Split.TRAIN)), list(t.tasks(Split.HELDOUT))
            everything += train + heldout
            totals.update(train=len(train), heldout=len(heldout))
            m = medians(train + heldout)
            table.add_row(
                t.name,
                t.category.value,
                str(t.difficulty),
                str(len(train)),
                str(len(heldout)),
                f"{m.changed_lines:g}",
                f"{m.description_chars:g}",
            )
            progress.update(advance=1, info=t.name)
    table.add_section()
    m = medians(everything)
    table.add_row(
        "all",
        "",
        "",
        str(totals["train"]),
        str(totals["heldout"]),
        f"{m.changed_lines:g}",
        f"{m.description_chars:g}",
    )
    console.print(table)
    console.print(
        "lines: median changed lines of the oracle's diff (added + removed); "
        "chars: median description length"
    )
    by_category = Table(title="medians per category (both splits)")
    for column in ("category", "tasks", "changed lines", "files changed", "description chars"):
        by_category.add_column(column, justify="left" if column == "category" else "right")
    for name, row in medians_by_category(everything).items():
        by_category.add_row(
            name,
            str(row.tasks),
            f"{row.changed_lines:g}",
            f"{row.files_changed:g}",
            f"{row.description_chars:g}",
        )
    console.print(by_category)
    return 0


def _check_per_template(value: int, zero_is_all: bool = True) -> None:
    """--per-template is a count (for export, 0: every task); refused before any task is
    generated (validate with 0 checked nothing and said "0/0 tasks valid")."""
    if value < 0 or (value == 0 and not zero_is_all):
        allowed = "0 (every task) or a positive count" if zero_is_all else "a positive count"
        raise ConfigError(f"--per-template {value}: give {allowed}")


def _check_export_target(out: Path) -> None:
    """OUT must be writable as what its name says, checked before the tasks are generated
    (minutes for the whole split): a file given where a directory goes ended, after that
    work, in a NotADirectoryError traceback."""
    jsonl = out.suffix == ".jsonl"
    if jsonl and out.is_dir():
        raise ConfigError(f"{out} is a directory: give a new file ending in .jsonl, or drop .jsonl")
    if not jsonl and out.exists() and not out.is_dir():
        raise ConfigError(
            f"{out} is a file: give a directory for task directories, or a name ending in "
            ".jsonl for one JSONL file"
        )
    for parent in (out.parent, *out.parent.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{parent} is a file, so {out} cannot be made under it")
            return


def export_tasks(args: argparse.Namespace) -> int:
    from composer_rl.tasks import (
        Split,
        collect_tasks,
        sample_tasks,
        save_task_dir,
        save_tasks_jsonl,
    )

    _check_per_template(args.per_template)
    _check_export_target(args.out)
    tasks = collect_tasks(Split(args.split), pm=None)  # the built-in templates' tasks
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
    """Exit 0 when every task is valid, 1 when some are not (each is reported with its
    reason, and the rest are still checked), 2 when the path holds no readable task."""
    from composer_rl.agent.oracle import play_oracle
    from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox
    from composer_rl.tasks import Split, TaskFormatError, collect_tasks, load_tasks, sample_tasks
    from composer_rl.tasks.checks import oracle_failure_reason, unsolved_pass_reason

    if not args.path:
        _check_per_template(args.per_template, zero_is_all=False)
    problems: list[TaskFormatError] = []
    if args.path:
        try:
            tasks = load_tasks(args.path, problems=problems)
        except TaskFormatError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if not tasks:
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr)
            print(f"error: {args.path}: no task could be read", file=sys.stderr)
            return 2
    else:
        # The built-in templates' tasks (a plugin's come with no oracle to check).
        tasks = sample_tasks(collect_tasks(Split(args.split), pm=None), args.per_template)
    # Every line flushed: off a terminal (`> log`, CI) Python buffers stdout, and a folder of
    # tasks that takes minutes to grade showed nothing until the last one.
    for problem in problems:
        print(f"malformed: {problem}", flush=True)
    bad = len(problems)
    for task in tasks:
        demo = play_oracle(task, backend=args.backend)
        with open_sandbox(task, args.backend) as sandbox:
            unsolved = grade_sandbox(sandbox, task)
        if not demo.solved:
            status = "oracle fails: " + oracle_failure_reason(task, demo.test_output)
        elif unsolved.all_passed:
            status = "unsolved passes: " + unsolved_pass_reason(unsolved.passed)
        else:
            status = "ok"
        bad += status != "ok"
        print(f"{task.id}: {status}", flush=True)
    total = len(tasks) + len(problems)
    print(f"{total - bad}/{total} tasks valid")
    return 1 if bad else 0
