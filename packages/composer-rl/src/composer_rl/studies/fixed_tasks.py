"""RL on a few training tasks it sees again and again: the setting where this policy learns.

Single-epoch RL at the defaults does not raise held-out pass@1 on the tiny policy (issue 12,
composer-rl README), so a question like "does router replay help learning?" cannot be asked
of held-out tasks here. It can be asked where RL measurably learns: a handful of training
tasks, each copied `repeats` times under new ids (a task file given to `tasks.source`), so
the single-epoch sampler hands each one out `repeats` times and the real loop trains on
them. The policy before and after is scored on exactly those tasks, paired by task.

`benchmarks/rl_fit_fixed_tasks.py` (is the update right at all?) and the router-replay
study's learning runs (replay on against off) both use this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from composer_rl.eval.stats import mean_se
from composer_rl.rl.episodes import read_episodes
from composer_rl.tasks import Split
from composer_rl.tasks.io import save_tasks_jsonl
from composer_rl.tasks.model import Task
from composer_rl.tasks.sources import collect_tasks

TEMPLATES = (
    "implement_stub",
    "read_constant",
    "fix_operator",
    "extract_constant",
    "add_sort_flag",
    "find_definition",
    "off_by_one",
    "add_docstring",
)
"""Templates the stage-one SFT policy solves sometimes at temperature 1: their groups mix
solved and failed episodes, which is where a group baseline has signal."""


@dataclass(frozen=True)
class FixedTasks:
    """`tasks` distinct training tasks, each handed out `repeats` times."""

    tasks: int = 16
    repeats: int = 8

    def pick(self, seed: int) -> list[Task]:
        """Training tasks round robin over `TEMPLATES`, in a seeded order."""
        by_template: dict[str, list[Task]] = {}
        for task in collect_tasks(Split.TRAIN, pm=None):  # the built-in templates'
            template = task.id.rsplit("-", 1)[0]
            if template in TEMPLATES:
                by_template.setdefault(template, []).append(task)
        for tasks in by_template.values():
            tasks.sort(key=lambda t: t.id)
            tasks[:] = tasks[seed:] + tasks[:seed]
        picked: list[Task] = []
        while len(picked) < self.tasks and any(by_template.values()):
            for template in TEMPLATES:
                if by_template.get(template) and len(picked) < self.tasks:
                    picked.append(by_template[template].pop(0))
        return picked

    def copies(self, tasks: list[Task]) -> list[Task]:
        """Each task `repeats` times under ids `<id>.r<k>`, marked as training tasks."""
        return [
            task.model_copy(
                update={"id": f"{task.id}.r{k}", "metadata": {**task.metadata, "split": "train"}}
            )
            for k in range(self.repeats)
            for task in tasks
        ]

    def write(self, seed: int, path: Path) -> tuple[list[Task], Path]:
        """The picked tasks and the task file of their copies (for `tasks.source`)."""
        tasks = self.pick(seed)
        return tasks, save_tasks_jsonl(self.copies(tasks), path)


def training_curve(run_dir: Path, parts: int = 4) -> list[tuple[float, float, int]]:
    """Solve rate of a run's episodes in `parts` consecutive slices of its groups: (mean,
    s.e. over groups, episodes) each."""
    groups: dict[str, list[bool]] = {}
    for episode in read_episodes(run_dir, scored_only=False):
        groups.setdefault(episode["group"], []).append(bool(episode["solved"]))
    ordered = [groups[g] for g in sorted(groups)]
    out = []
    size = max(1, math.ceil(len(ordered) / parts))
    for start in range(0, len(ordered), size):
        part = ordered[start : start + size]
        mean, se = mean_se(sum(g) / len(g) for g in part)
        out.append((mean, se, sum(len(g) for g in part)))
    return out


__all__ = ["TEMPLATES", "FixedTasks", "training_curve"]
