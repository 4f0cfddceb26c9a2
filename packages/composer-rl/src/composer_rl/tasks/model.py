"""The task record: a small repository, an instruction, hidden tests and an oracle solution.

A task is plain data so that it can be written to disk, shipped to a sandbox on another
machine, and read back by a third party who brings their own tasks. The oracle is a list
of edits (not a final tree) because the same edits become the tool calls of the SFT
demonstration: one representation serves grading and imitation.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from composer_infra.sandbox import Task as SandboxTask

GRADING_DIR = "_grading"
"""Folder the hidden tests are copied into at grading time (absent while the agent works)."""

DEFAULT_TEST_COMMAND = f"python -P -m pytest -q -p no:cacheprovider {GRADING_DIR}"
"""`-P`: the workspace is not put first on `sys.path`, so a `pytest.py` the policy wrote
shadows nothing (the grader puts the workspace on the path itself: composer_infra's
`junit_command`)."""


VISIBLE_TESTS_DIR = "tests"
"""Folder of a repository's own tests, which the agent may read and run (the hidden tests
under `GRADING_DIR` alone decide correctness)."""

VISIBLE_TEST_COMMAND = f"python -m pytest -q --tb=line -rN {VISIBLE_TESTS_DIR}"
"""How the agent runs a repository's visible tests with the `run` tool: one line per failure
(its assertion message) and the counts, so that a failing run fits the tiny model's context
(a default traceback of one failed assertion is about three times as long)."""


class Category(StrEnum):
    """The report's task mix (the order is the report's, largest share first)."""

    FEATURE_ITERATION = "feature_iteration"
    DEBUGGING = "debugging"
    NEW_FEATURE = "new_feature"
    REFACTOR = "refactor"
    UNDERSTANDING = "understanding"
    DOCUMENTATION = "documentation"
    TESTING = "testing"
    CODE_REVIEW = "code_review"
    OPTIMISATION = "optimisation"
    DEVOPS = "devops"
    MIGRATION = "migration"


class Split(StrEnum):
    TRAIN = "train"
    HELDOUT = "heldout"


PATH_RULE = (
    "a path relative to the repository root, with '/' between parts and no '.', '..' or "
    "empty parts, such as 'pkg/module.py'"
)


def check_relative_path(path: str) -> str:
    """A repository path must stay inside the repository: relative, normalised, no `..`.

    The error says what is allowed rather than suggesting a rewrite: the normal form of a
    path that leaves the repository (`../x.py`) still leaves it.
    """
    if not path or path.startswith("/") or "\\" in path:
        raise ValueError(f"file path {path!r} is not allowed: write {PATH_RULE}")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise ValueError(
            f"file path {path!r} points outside the repository; tasks may only hold files "
            f"inside it: write {PATH_RULE}"
        )
    if normal != path or normal == ".":
        raise ValueError(f"file path {path!r} is not normalised: write it as {normal!r}")
    return path


def _snippet(text: str, limit: int = 60) -> str:
    """A short, one-line rendering of `text` for error messages."""
    shown = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(shown)


class Edit(BaseModel):
    """One change to one file: replace the single occurrence of `old` by `new`, or, when
    `old` is None, write `new` as the whole file (creating it if needed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    old: str | None = None
    new: str

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        return check_relative_path(value)

    def apply(self, files: dict[str, str]) -> dict[str, str]:
        out = dict(files)
        if self.old is None:
            out[self.path] = self.new
            return out
        if self.path not in files:
            raise ValueError(f"edit of {self.path!r}: the file does not exist in the repository")
        count = files[self.path].count(self.old)
        if count != 1:
            raise ValueError(
                f"edit of {self.path!r}: the text to replace ({_snippet(self.old)}) occurs "
                f"{count} times in the file, it must occur exactly once"
            )
        out[self.path] = files[self.path].replace(self.old, self.new)
        return out


class Task(SandboxTask):
    """One coding task. `files` is what the agent sees; `tests` are hidden until grading.

    A composer-infra sandbox `Task` (id, instruction, files, test command, the tests the
    grader must find and may see skip) with what a task suite adds: the hidden tests, the
    oracle solution, category, difficulty and labels. Those fields are declared once, there;
    here only the id is required (a task source names every task, and ids name files) and
    the test command defaults to the hidden tests under `_grading/`. A sandbox is opened
    with the composer-infra part alone (`composer_rl.agent.sandboxes.sandbox_task`).
    """

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    category: Category
    difficulty: int = Field(ge=1, le=3)
    tests: dict[str, str] = Field(min_length=1)
    test_command: str = DEFAULT_TEST_COMMAND
    solution: list[Edit] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("files", "tests")
    @classmethod
    def _relative_paths(cls, value: dict[str, str]) -> dict[str, str]:  # the sandbox's, stricter
        for path in value:
            check_relative_path(path)
        return value

    @model_validator(mode="after")
    def _tests_in_grading_dir(self) -> Task:
        for path in self.tests:
            if not path.startswith(GRADING_DIR + "/"):
                raise ValueError(
                    f"task {self.id}: hidden test {path!r} must live under {GRADING_DIR}/ "
                    "so that it cannot clash with the repository's own files"
                )
        return self

    def solved_files(self) -> dict[str, str]:
        """The repository after the oracle edits."""
        files = dict(self.files)
        for edit in self.solution:
            files = edit.apply(files)
        return files

    @property
    def split(self) -> str | None:
        value = self.metadata.get("split")
        return str(value) if value is not None else None


@runtime_checkable
class TaskSource(Protocol):
    """A named source of tasks (`composer_rl.tasks.sources` has the built-in ones; plugins
    contribute more through the `composer_task_sources` hook)."""

    name: str

    def tasks(self, split: Split) -> Iterable[Task]: ...
