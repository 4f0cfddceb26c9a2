"""The policy's own mistakes: wrong first attempts taken from its failed episodes.

A recovering demonstration opens with a wrong first edit, a failing run of the visible
tests and the fix. Corrections of someone else's mistakes (a template's `wrong_edits`, a
generic mutation: `composer_rl.agent.mistakes`) teach less than corrections of the mistakes
the policy itself makes (issue 29), so stage one's second SFT round
(`composer_rl.stages.sft_round2`) takes them from the SFT policy's own episodes.

An episode gives an attempt (`policy_attempt`) when it failed (its hidden tests did not all
pass, and it was graded) and its final workspace differs from the original repository. The
attempt is the edits from the original files to the final ones
(`composer_rl.agent.mistakes.corrections`: the smallest unique line edit per changed file,
a whole-file write per new one), with source `"policy"` and what it did as `what`. It is
kept only when those edits reproduce the final files exactly, leave no file the tools
cannot put back (a file removed, or one the solution lacks), and the visible tests fail
after them (they ran, and some failed: `tests_failed`), as every wrong attempt must.
`play_recovering_from` plays the recovering demonstration that opens with it.

Which episodes, on which tasks, is the caller's: the second round runs the SFT checkpoint
at T=1 on training tasks only, never on validation or held-out ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from composer_rl.agent.demonstrations import (
    describe_edits,
    pytest_summary,
    tests_failed,
    visible_run,
)
from composer_rl.agent.episode import EpisodeResult
from composer_rl.agent.mistakes import AttemptSource, WrongAttempt, apply_edits, corrections
from composer_rl.agent.sandboxes import in_workspace_listing
from composer_rl.tasks.model import Edit, Task

POLICY_SOURCE: AttemptSource = "policy"

DROP_REASONS: tuple[str, ...] = (
    "not graded",
    "solved",
    "unchanged",
    "a file removed or unreadable",
    "a file the solution lacks",
    "the oracle's state",
    "edits do not reproduce the files",
    "visible tests do not fail",
)
"""Why an episode gives no attempt, in the order `policy_attempt` checks."""


@dataclass(frozen=True)
class PolicyAttempt:
    """A wrong first attempt made by the policy in one episode of a task."""

    task_id: str
    sample: int
    attempt: WrongAttempt
    visible: str
    """What the visible tests printed after the attempt ("1 failed, 1 passed")."""
    stop_reason: str
    """How the episode ended (`EpisodeResult.stop_reason`: finish, max_turns, ...)."""

    def record(self) -> dict[str, Any]:
        """A JSON-ready record of the attempt (a line of `attempts.jsonl`)."""
        return {
            "task": self.task_id,
            "sample": self.sample,
            "source": self.attempt.source,
            "what": self.attempt.what,
            "visible": self.visible,
            "stop_reason": self.stop_reason,
            "edits": [e.model_dump() for e in self.attempt.edits],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PolicyAttempt:
        edits = tuple(Edit.model_validate(e) for e in record["edits"])
        return cls(
            task_id=str(record["task"]),
            sample=int(record["sample"]),
            attempt=WrongAttempt(edits, POLICY_SOURCE, str(record["what"])),
            visible=str(record["visible"]),
            stop_reason=str(record["stop_reason"]),
        )


def attempt_from_files(task: Task, files: dict[str, str]) -> tuple[WrongAttempt | None, str]:
    """(the wrong attempt that turns `task`'s repository into `files`, "") or (None, why
    not: one of `DROP_REASONS`). `files` is a final workspace as `workspace_files` reads it,
    so original files it cannot list (dot-files) count as unchanged. The visible tests are
    not run here (`policy_attempt` runs them)."""
    unlisted = {p: t for p, t in task.files.items() if not in_workspace_listing(p)}
    final = {**unlisted, **files}
    solved = task.solved_files()
    if final == task.files:
        return None, "unchanged"
    if set(task.files) - set(final):
        return None, "a file removed or unreadable"
    if set(final) - set(solved):
        return None, "a file the solution lacks"
    if final == solved:
        return None, "the oracle's state"
    edits = corrections(task.files, final) or []
    if apply_edits(dict(task.files), edits) != final:
        return None, "edits do not reproduce the files"
    return WrongAttempt(tuple(edits), POLICY_SOURCE, describe_edits(edits, task.files)), ""


def policy_attempt(
    result: EpisodeResult, backend: str | None = None
) -> tuple[PolicyAttempt | None, str]:
    """The attempt of one episode, or (None, why not: one of `DROP_REASONS`). Runs the
    visible tests on the attempt's end state in a scratch sandbox."""
    if result.grading_error is not None or result.report is None:
        return None, "not graded"
    if result.solved:
        return None, "solved"
    task = result.task
    attempt, reason = attempt_from_files(task, result.files_after)
    if attempt is None:
        return None, reason
    after = apply_edits(dict(task.files), attempt.edits) or {}
    run = visible_run(task, after, backend)
    if not tests_failed(run):
        return None, "visible tests do not fail"
    return PolicyAttempt(
        task_id=task.id,
        sample=result.sample,
        attempt=attempt,
        visible=pytest_summary(run.output),
        stop_reason=result.stop_reason,
    ), ""


__all__ = [
    "DROP_REASONS",
    "POLICY_SOURCE",
    "PolicyAttempt",
    "attempt_from_files",
    "policy_attempt",
]
