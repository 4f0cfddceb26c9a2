"""What a task template is: a parameter space and a function from parameters to a task.

A template's names (modules, functions, constants, ...) come from the vocabulary, where
every name belongs to one split (`vocab.name_split`); the parameters a template declares
as names (`Template.name_params`) decide its split, and `named_grid` draws every name of a
choice from one split. So a held-out task uses only names no training task uses, on every
machine and in every Python version (`tests/test_tasks_splits.py` checks). A template with
no names falls back to a hash of (template name, parameters).

Inside the training split, `is_validation` carves the validation tasks that settings are
chosen on.
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
from composer_rl.tasks.templates.vocab import name_split
from composer_rl.tasks.templates.vocab import names as vocab_names

Params = dict[str, Any]

HELDOUT_EVERY = 5
"""One parameter choice in this many (by hash) is held out, for templates without names."""

VALIDATION_EVERY = 5
"""One training task in this many is a validation task (`is_validation`)."""


def params_key(template: str, params: Mapping[str, Any]) -> str:
    return json.dumps([template, dict(sorted(params.items()))], sort_keys=True)


def name_values(value: Any) -> list[str]:
    """The names in a parameter value (a name, or lists and tuples of them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for item in value for v in name_values(item)]
    return []


def split_of(template: str, params: Mapping[str, Any], name_params: Sequence[str] = ()) -> Split:
    """The split of one parameter choice: the split of its names (the values of
    `name_params`, which must all be of one split), else a hash of the choice."""
    found = {name_split(v) for key in name_params for v in name_values(params.get(key))}
    if len(found) > 1:
        raise ValueError(
            f"template {template}: the names of {dict(params)} come from both splits; draw "
            "them with named_grid so that every name of a task is of one split"
        )
    if found:
        return found.pop()
    digest = hashlib.sha256(params_key(template, params).encode()).digest()
    return Split.HELDOUT if int.from_bytes(digest[:8], "big") % HELDOUT_EVERY == 0 else Split.TRAIN


def grid(**axes: Sequence[Any]) -> list[Params]:
    """Every combination of the given axes, in a stable order."""
    names = list(axes)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]


def named_grid(
    template: str,
    names: Mapping[str, Sequence[str]],
    *,
    train: int,
    heldout: int,
    distinct: bool = True,
    **axes: Sequence[Any],
) -> list[Params]:
    """Parameter choices whose names (`names`: parameter -> vocabulary pool) all come from
    one split, combined with the other `axes`: at most `train` choices on training names and
    `heldout` on held-out names, picked by a hash of each choice (stable, spread over the
    names) from every combination. `distinct`: no name twice in one choice."""
    chosen: list[Params] = []
    for split, limit in ((Split.TRAIN, train), (Split.HELDOUT, heldout)):
        pools = {key: vocab_names(pool, split) for key, pool in names.items()}
        every = [
            p
            for p in grid(**pools, **axes)
            if not distinct or len({p[k] for k in names}) == len(names)
        ]
        every.sort(key=lambda p: hashlib.sha256(params_key(template, p).encode()).digest())
        chosen += every[:limit]
    return chosen


def is_validation(task: Task) -> bool:
    """Whether a training task is a validation task (settings are chosen on these, never on
    the held-out split): one in `VALIDATION_EVERY` by a hash of the task id (of the pair
    group, for a minimal pair), so membership never changes when other tasks are added."""
    if task.split != Split.TRAIN.value:
        return False
    # A minimal pair is one unit: its members differ in one word, and a pair split between
    # training and validation would let a setting be chosen on a task trained in other words.
    unit = task.metadata.get("pair") or task.id
    digest = hashlib.sha256(f"validation:{unit}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % VALIDATION_EVERY == 0


class Template(ABC):
    """A family of tasks. Subclasses set the class attributes and implement the two methods."""

    name: ClassVar[str]
    category: ClassVar[Category]
    difficulty: ClassVar[int]
    name_params: ClassVar[tuple[str, ...]] = ()
    """Parameters whose values are vocabulary names: they decide the split (`split_of`)."""

    @abstractmethod
    def parameter_space(self) -> list[Params]:
        """Every parameter choice this template accepts (finite, deterministic order)."""

    @abstractmethod
    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        """(instruction, repository files, hidden tests, oracle edits) for one choice."""

    def context_files(self, params: Params) -> list[str]:
        """Files the oracle reads before editing (its demonstration opens with them)."""
        return []

    def wrong_edits(self, params: Params) -> list[list[Edit]]:
        """Plausible wrong first attempts at this task, each a list of edits of the original
        repository (the mistakes made on this kind of task: the wrong file, the other
        bound). The recovering demonstrations try these before the generic mutations of the
        oracle's edits (`composer_rl.agent.mistakes`); one counts only if the visible tests
        fail after it. Default: none, the generic mutations alone."""
        return []

    def split(self, params: Params) -> Split:
        return split_of(self.name, params, self.name_params)

    def build(self, params: Params, split: Split | None = None) -> Task:
        """The task of one choice; `split` overrides the split its names decide (a training
        task rendered with invented names, `composer_rl.tasks.invented`)."""
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
                "split": (split or self.split(params)).value,
                "context_files": self.context_files(params),
                "source": "builtin",
                "changed_lines": changed_lines(files, after),
                "files_changed": files_changed(files, after),
            },
        )

    def tasks(self, split: Split | None = None) -> Iterator[Task]:
        for params in self.parameter_space():
            if split is None or self.split(params) == split:
                yield self.build(params)
