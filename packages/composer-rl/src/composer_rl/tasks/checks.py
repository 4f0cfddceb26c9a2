"""Why a task is not valid, in words a task author can act on.

`composer-rl tasks validate` plays the oracle and grades the untouched repository; when
either goes wrong these functions say which edit, file or test is to blame, instead of a
bare "oracle fails".
"""

from __future__ import annotations

from composer_rl.tasks.model import Task


def oracle_problem(task: Task) -> str | None:
    """What stops the oracle's edits from applying, or None when they apply cleanly."""
    if not task.solution:
        return (
            "the solution is empty: list the edits that solve the task under `solution` "
            "(each {path, old, new}, or {path, new} for a whole file)"
        )
    files = dict(task.files)
    for number, edit in enumerate(task.solution, start=1):
        try:
            files = edit.apply(files)
        except ValueError as exc:
            hint = ""
            if not task.files:
                hint = " (the repository is empty: a task directory needs a repo/ folder)"
            return f"solution edit {number} of {len(task.solution)}: {exc}{hint}"
    if files == task.files:
        return "the solution's edits leave every file as it was"
    return None


def failing_tests(output: str, limit: int = 5) -> str:
    """The tests pytest's summary names as failed, or the output's last line."""
    bad = [
        line.split(" ", 1)[1].strip()
        for line in output.splitlines()
        if line.startswith(("FAILED ", "ERROR "))
    ]
    if bad:
        shown = ", ".join(bad[:limit]) + (
            f" and {len(bad) - limit} more" if len(bad) > limit else ""
        )
        return f"failing: {shown}"
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return f"output: {lines[-1].strip()}" if lines else "the test command printed nothing"


def oracle_failure_reason(task: Task, output: str) -> str:
    """Why the oracle did not pass: an edit that does not apply, or the tests that fail."""
    problem = oracle_problem(task)
    if problem is not None:
        return problem
    return "the hidden tests fail after the oracle's edits; " + failing_tests(output)


def unsolved_pass_reason(passed: int) -> str:
    return (
        f"the hidden tests already pass on the untouched repository ({passed} passed): "
        "they must fail until the task is done"
    )
