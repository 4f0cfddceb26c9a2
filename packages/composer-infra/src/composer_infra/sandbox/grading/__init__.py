"""The grader's side of a test run: what runs next to the hidden tests, never in the workspace.

- `runner.py` is the test command: the grader writes it next to the hidden tests as
  `_composer_runner.py` and runs pytest through it (`GradingRun.argv`); it writes the only
  report the grader believes, signed with a nonce of this grading.
- `probe.py` is copied beside the hidden tests as `workspace_probe.py`: hidden tests call
  workspace code through it, in a child process, and compare plain data.
- `canaries.py` is copied beside the runner as `_composer_canaries.py`: when hidden tests
  import workspace code, the runner adds control tests whose outcome it knows in advance,
  and fails the grading as tampering when one comes back otherwise.
- `verdict.py` turns the task's test command into a `GradingRun` and the runner's report
  (or its absence) into a `TestReport` that fails closed.
- `attacks.py` is no part of a grading: the attacks on it a policy could write, as data, for
  this package's tests, composer-rl's and a new task source's to grade.

docs/grading.md (in the repository) says what the grader trusts and why.
"""

from importlib.resources import files

from composer_infra.sandbox.grading.canaries import CANARIES_MODULE
from composer_infra.sandbox.grading.probe import MODULE_NAME as PROBE_MODULE
from composer_infra.sandbox.grading.runner import NONCE_NAME, REPORT_NAME, RUNNER_MODULE
from composer_infra.sandbox.grading.verdict import (
    GRADER_CASE,
    GradingRun,
    PytestCommand,
    build_report,
    parse_test_command,
    refused,
)


def probe_source() -> str:
    """The text of `probe.py`, as the grader writes it next to the hidden tests."""
    return files(__package__).joinpath("probe.py").read_text(encoding="utf-8")


def runner_source() -> str:
    """The text of `runner.py`, as the grader writes it next to the hidden tests."""
    return files(__package__).joinpath("runner.py").read_text(encoding="utf-8")


def canaries_source() -> str:
    """The text of `canaries.py`, as the grader writes it beside the runner."""
    return files(__package__).joinpath("canaries.py").read_text(encoding="utf-8")


def grader_files(run: GradingRun) -> dict[str, str]:
    """Workspace-relative path -> text of the files the grader writes for `run`."""
    return {
        f"{run.runner_dir}/{RUNNER_MODULE}.py": runner_source(),
        f"{run.runner_dir}/{CANARIES_MODULE}.py": canaries_source(),
        f"{run.runner_dir}/{PROBE_MODULE}.py": probe_source(),
    }


__all__ = [
    "CANARIES_MODULE",
    "GRADER_CASE",
    "NONCE_NAME",
    "PROBE_MODULE",
    "REPORT_NAME",
    "RUNNER_MODULE",
    "GradingRun",
    "PytestCommand",
    "build_report",
    "canaries_source",
    "grader_files",
    "parse_test_command",
    "probe_source",
    "refused",
    "runner_source",
]
