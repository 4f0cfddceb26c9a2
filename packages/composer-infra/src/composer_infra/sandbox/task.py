"""A coding task: the repository it starts from, what to do, and how it is checked."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Task(BaseModel):
    """What a sandbox is made from.

    `files` maps workspace-relative POSIX paths to their text; `test_command` is the
    pytest command `Sandbox.run_tests` grades with (`python [-P|-I] -m pytest ARGS` or
    `pytest ARGS`: the grader runs its arguments under its own runner; any other command is
    graded failed). `python -m pytest` (no `-P`/`-I`) lets the hidden tests import the
    workspace, as SWE-bench-format tests must (docs/grading.md says what that leaves open).

    `expected_tests`: test ids (or files, classes, parametrised families: `path::Test`) that
    must each be in the grader's report, on top of any node ids the command names; a
    missing one fails the grading. `allowed_skips`: the ids that may skip; any other skip
    fails it (a skip counts as neither passed nor failed, so an undeclared one is a way
    around a failing test).

    composer-rl's task (`composer_rl.tasks.model.Task`) is this class with what a task suite
    adds (hidden tests, an oracle solution, category, difficulty); a sandbox is opened with
    this part of it only, so its hidden tests never reach the sandbox or its snapshots.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = "task"
    instruction: str = Field(min_length=1)
    files: dict[str, str] = Field(default_factory=dict)
    test_command: str = "python -P -m pytest -q"  # -P: the hidden tests import no workspace code
    expected_tests: tuple[str, ...] = ()
    allowed_skips: tuple[str, ...] = ()

    @field_validator("files")
    @classmethod
    def _relative_paths(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            path = PurePosixPath(name)
            if path.is_absolute() or ".." in path.parts or not path.parts:
                raise ValueError(
                    f"task file {name!r} must be a relative path inside the repository "
                    "(no leading '/', no '..')"
                )
        return files
