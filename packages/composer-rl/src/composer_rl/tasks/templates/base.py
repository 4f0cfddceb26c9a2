"""What a task template is: a parameter space and a function from parameters to a task.

Splits are decided by a hash of (template name, parameters), so one parameter choice lands
in exactly one split on every machine and in every Python version; the held-out split can
therefore never meet a training parameter, which `tests/test_tasks_splits.py` checks.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from composer_rl.tasks.model import Category, Edit, Split, Task
from composer_rl.tasks.stats import changed_lines, files_changed

Params = dict[str, Any]

HELDOUT_EVERY = 5
"""One parameter choice in this many (by hash) is held out."""


def params_key(template: str, params: Mapping[str, Any]) -> str:
    return json.dumps([template, dict(sorted(params.items()))], sort_keys=True)


def split_of(template: str, params: Mapping[str, Any]) -> Split:
    digest = hashlib.sha256(params_key(template, params).encode()).digest()
    return Split.HELDOUT if int.from_bytes(digest[:8], "big") % HELDOUT_EVERY == 0 else Split.TRAIN


def grid(**axes: Sequence[Any]) -> list[Params]:
    """Every combination of the given axes, in a stable order."""
    names = list(axes)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]


class Template(ABC):
    """A family of tasks. Subclasses set the class attributes and implement the two methods."""

    name: ClassVar[str]
    category: ClassVar[Category]
    difficulty: ClassVar[int]

    @abstractmethod
    def parameter_space(self) -> list[Params]:
        """Every parameter choice this template accepts (finite, deterministic order)."""

    @abstractmethod
    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        """(instruction, repository files, hidden tests, oracle edits) for one choice."""

    def context_files(self, params: Params) -> list[str]:
        """Files the oracle reads before editing (its demonstration opens with them)."""
        return []

    def build(self, params: Params) -> Task:
        instruction, files, tests, solution = self.render(params)
        digest = hashlib.sha256(params_key(self.name, params).encode()).hexdigest()[:10]
        after = dict(files)
        for edit in solution:
            after = edit.apply(after)
        return Task(
            id=f"{self.name}-{digest}",
            category=self.category,
            difficulty=self.difficulty,
            instruction=instruction,
            files=files,
            tests=tests,
            solution=solution,
            metadata={
                "template": self.name,
                "params": params,
                "split": split_of(self.name, params).value,
                "context_files": self.context_files(params),
                "source": "builtin",
                "changed_lines": changed_lines(files, after),
                "files_changed": files_changed(files, after),
            },
        )

    def tasks(self, split: Split | None = None) -> Iterator[Task]:
        for params in self.parameter_space():
            if split is None or split_of(self.name, params) == split:
                yield self.build(params)
