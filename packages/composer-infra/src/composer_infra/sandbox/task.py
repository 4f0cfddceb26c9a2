"""A coding task: the repository it starts from, what to do, and how it is checked."""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Task(BaseModel):
    """What a sandbox is made from.

    `files` maps workspace-relative POSIX paths to their text; `test_command` is run
    inside the sandbox by `Sandbox.run_tests` (pytest commands report per-test results).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = "task"
    instruction: str
    files: dict[str, str] = Field(default_factory=dict)
    test_command: str = "python -P -m pytest -q"  # -P: see junit_command

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
