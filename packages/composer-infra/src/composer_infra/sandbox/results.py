"""Structured results of tools, commands and test runs.

Nothing the agent does raises: every call comes back as one of these, so an episode
never ends on a bad tool call.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TestOutcome = Literal["passed", "failed", "error", "skipped"]


class ToolResult(BaseModel):
    """What a tool call returns: `ok`, the text for the model, and an error if it failed."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    output: str = ""
    error: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def success(cls, output: str = "", **data: Any) -> ToolResult:
        return cls(ok=True, output=output, data=data)

    @classmethod
    def failure(cls, error: str, output: str = "", **data: Any) -> ToolResult:
        return cls(ok=False, output=output, error=error, data=data)


class CommandResult(BaseModel):
    """One shell command run in the sandbox (stdout and stderr interleaved in `output`)."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    output_bytes: int = 0
    killed_for_output: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.killed_for_output


class TestCase(BaseModel):
    """One test as the runner reported it."""

    __test__ = False  # not a pytest test class, despite the name
    model_config = ConfigDict(frozen=True)

    name: str
    outcome: TestOutcome
    message: str = ""


class TestReport(BaseModel):
    """The verdict on the task's tests: counts and each test, from the grader's own report.

    `source` is `"grader"` when the counts come from the report the grader's runner wrote
    and signed for this grading (`composer_infra.sandbox.grading`), `"none"` when there was
    no report the grader believes. `failure_reason` says why a grading failed closed (no
    report, a report the grader did not write, a missing test, an undeclared skip, an exit
    status that disagrees, a kill for time or output); such a report also holds an `error`
    case named `<grader>` with the reason, so code that only counts outcomes counts it too.
    """

    __test__ = False
    model_config = ConfigDict(frozen=True)

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    tests: tuple[TestCase, ...] = ()
    exit_code: int | None = None
    timed_out: bool = False
    source: Literal["grader", "none"] = "none"
    failure_reason: str | None = None
    output: str = ""

    @property
    def outcomes(self) -> dict[str, TestOutcome]:
        """Per-test outcomes, in the shape composer-rewards' `TestResults.outcomes` takes."""
        return {case.name: case.outcome for case in self.tests}

    @property
    def all_passed(self) -> bool:
        """Passed only on the grader's own report, with no reason to fail and no failure."""
        return (
            self.source == "grader"
            and self.failure_reason is None
            and self.passed > 0
            and self.failed == 0
            and self.errors == 0
            and not self.timed_out
        )
