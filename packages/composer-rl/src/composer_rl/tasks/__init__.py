"""The task suite: templates that generate small repositories with hidden tests and an
oracle solution, a task format on disk, and a plugin hook for more task sources."""

from composer_rl.tasks import hookspecs
from composer_rl.tasks.grading import TestReport, grade_files
from composer_rl.tasks.io import TaskFormatError, load_tasks, save_task_dir, save_tasks_jsonl
from composer_rl.tasks.mix import DEFAULT_WEIGHTS, TaskMix, mix_metrics, realised_mix
from composer_rl.tasks.model import GRADING_DIR, Category, Edit, Split, Task, TaskSource
from composer_rl.tasks.sources import (
    BuiltinTaskSource,
    DirectoryTaskSource,
    collect_tasks,
    sample_tasks,
)
from composer_rl.tasks.swebench import SWEBenchTaskSource
from composer_rl.tasks.templates import BUILTIN_TEMPLATES, Template, split_of

__all__ = [
    "BUILTIN_TEMPLATES",
    "DEFAULT_WEIGHTS",
    "GRADING_DIR",
    "BuiltinTaskSource",
    "Category",
    "DirectoryTaskSource",
    "Edit",
    "SWEBenchTaskSource",
    "Split",
    "Task",
    "TaskFormatError",
    "TaskMix",
    "TaskSource",
    "Template",
    "TestReport",
    "collect_tasks",
    "grade_files",
    "hookspecs",
    "load_tasks",
    "mix_metrics",
    "realised_mix",
    "sample_tasks",
    "save_task_dir",
    "save_tasks_jsonl",
    "split_of",
]
