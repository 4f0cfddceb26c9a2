"""`composer-rl eval --suite bench`: a fixed, versioned, CursorBench-style held-out set.

CursorBench differs from public benchmarks by larger changes and shorter descriptions. The
bench takes the held-out split (never a training parameter choice: the split is a hash of
template and parameters) of the templates whose changes are larger than the training
templates' median, with short instructions, and freezes it: `BENCH_DIGEST` is a SHA-256
of every task's content, checked each time the bench is built, so a template edit that
would silently change the bench fails instead, and results of one version stay comparable.
To change the bench, bump `BENCH_VERSION` and the digest together.
"""

from __future__ import annotations

import hashlib
import json

from composer_rl.tasks.model import Split, Task
from composer_rl.tasks.sources import sample_tasks
from composer_rl.tasks.templates import BUILTIN_TEMPLATES

BENCH_VERSION = "bench-v4"  # v4: the templates rewritten for issues 29 and 30
BENCH_TEMPLATES: tuple[str, ...] = (
    "review_and_fix",
    "memoize_recursion",
    "batch_queries",
    "fix_ci",
    "move_callers",
    "tuples_to_dataclass",
)
"""Templates whose median change was larger than the training templates' median (4 lines)
when bench-v4 was frozen; the templates added since (issue 31's) are not in it."""
BENCH_PER_TEMPLATE = 4
BENCH_SEED = 18
BENCH_DIGEST = "0346349c3ed18e6ce59ff0622669be8a9d7cf5dec460e2f582133a281adfc5bd"


class BenchChangedError(RuntimeError):
    """The tasks of a bench version are not what they were when it was frozen."""


def bench_digest(tasks: list[Task]) -> str:
    """SHA-256 over the tasks' ids, instructions, files, hidden tests and test commands."""
    h = hashlib.sha256()
    for task in sorted(tasks, key=lambda t: t.id):
        record = [task.id, task.instruction, task.files, task.tests, task.test_command]
        h.update(json.dumps(record, sort_keys=True).encode())
    return h.hexdigest()


def bench_tasks(check: bool = True) -> list[Task]:
    """The bench's tasks, each tagged with the bench version; raises `BenchChangedError`
    when they differ from the frozen version."""
    by_name = {t.name: t for t in BUILTIN_TEMPLATES}
    pool: list[Task] = []
    for name in BENCH_TEMPLATES:
        heldout = list(by_name[name].tasks(Split.HELDOUT))
        # CursorBench's descriptions are short for the size of the change: the bench takes
        # each template's held-out tasks whose instruction is in the shortest third (the
        # tersest phrasing), so a policy must find what the description leaves out.
        lengths = sorted(len(t.instruction) for t in heldout)
        cut = lengths[(len(lengths) - 1) // 3]
        pool += [t for t in heldout if len(t.instruction) <= cut]
    tasks = sample_tasks(pool, per_group=BENCH_PER_TEMPLATE, seed=BENCH_SEED)
    if check:
        digest = bench_digest(tasks)
        if digest != BENCH_DIGEST:
            raise BenchChangedError(
                f"the tasks of {BENCH_VERSION} changed (digest {digest[:12]}, frozen "
                f"{BENCH_DIGEST[:12]}): a template they come from was edited. Bump "
                "BENCH_VERSION and BENCH_DIGEST in composer_rl/eval/bench.py so that old "
                "and new results are not compared as one benchmark."
            )
    return [
        t.model_copy(update={"metadata": {**t.metadata, "suite": BENCH_VERSION}}) for t in tasks
    ]
