"""Oracle demonstrations: the tool calls that solve a task, played in a real sandbox.

The oracle reads the task's context files, applies its edits (`edit_file` for a
replacement, `write_file` for a whole file) and finishes. Playing the calls in a
composer-infra sandbox gives the tool results exactly as the policy will see them, and
grading the end state proves the demonstration correct before anyone trains on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from composer_rewards import ToolCall
from composer_rl.agent.format import END_OF_TURN
from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox
from composer_rl.agent.summarize import SUMMARY_REQUEST, condensed_prompt
from composer_rl.agent.transcript import Segment, Transcript, tool_output_text
from composer_rl.tasks.model import Task

FINISH_MESSAGE = "Done."


def oracle_calls(task: Task) -> list[ToolCall]:
    calls = [
        ToolCall(name="read_file", arguments={"path": p})
        for p in task.metadata.get("context_files", [])
    ]
    for edit in task.solution:
        if edit.old is None:
            calls.append(
                ToolCall(name="write_file", arguments={"path": edit.path, "content": edit.new})
            )
        else:
            calls.append(
                ToolCall(
                    name="edit_file",
                    arguments={"path": edit.path, "old": edit.old, "new": edit.new},
                )
            )
    calls.append(ToolCall(name="finish", arguments={"message": FINISH_MESSAGE}))
    return calls


@dataclass
class Demonstration:
    """One played demonstration. `kind` is the behaviour it shows ("oracle" for
    `play_oracle`; the behaviours of `composer_rl.agent.behaviours` for the mix) and
    `details` what was decided while playing it (a fallback and why, the wrong first
    attempt, the visible-test runs), so stage one can count and audit its mix."""

    task_id: str
    transcript: Transcript
    solved: bool
    test_output: str
    kind: str = "oracle"
    details: dict[str, Any] = field(default_factory=dict)


def play_oracle(task: Task, backend: str | None = None, grade: bool = True) -> Demonstration:
    """Run the oracle's calls in a sandbox; the transcript holds the real tool results."""
    transcript = Transcript.start(task.instruction)
    with open_sandbox(task, backend) as sandbox:
        for call in oracle_calls(task):
            transcript.add_call(call)
            result = sandbox.call(call.name, dict(call.arguments))
            if call.name == "finish":
                break
            transcript.add_result(tool_output_text(result.ok, result.output, result.error))
        transcript.end_turn()
        report = grade_sandbox(sandbox, task) if grade else None
    return Demonstration(
        task_id=task.id,
        transcript=transcript,
        solved=bool(report and report.all_passed),
        test_output=report.output if report else "",
    )


def oracle_summary(task: Task) -> str:
    """What a good summary after the reading calls says: what was read, and every change
    still to make with the exact text it replaces (the facts the condensed context needs)."""
    lines = []
    read = task.metadata.get("context_files", [])
    if read:
        lines.append("Read " + ", ".join(read) + ".")
    for edit in task.solution:
        if edit.old is None:
            lines.append(f"To do: write {edit.path}.")
        else:
            lines.append(f"To do: in {edit.path} replace\n{edit.old}")
    return "\n".join(lines) or "Nothing read yet."


def summary_demonstration(task: Task, backend: str | None = None) -> list[Transcript]:
    """A self-summarized oracle episode: read, summarize, then solve from the condensed context.

    Two transcripts (the two segments of the chain), each an SFT example: the first ends
    with the summary the model should write when asked, the second starts from the condensed
    context and carries out the remaining edits. None of the reading results survive into
    the second segment except through the summary.
    """
    calls = oracle_calls(task)
    reads = [c for c in calls if c.name == "read_file"]
    rest = [c for c in calls if c.name != "read_file"]
    summary = oracle_summary(task)
    first = Transcript.start(task.instruction)
    second = Transcript([Segment("prompt", condensed_prompt(task.instruction, summary, 1))])
    with open_sandbox(task, backend) as sandbox:
        for call in reads:
            first.add_call(call)
            result = sandbox.call(call.name, dict(call.arguments))
            first.add_result(tool_output_text(result.ok, result.output, result.error))
        first.segments.append(Segment("prompt", SUMMARY_REQUEST))
        first.segments.append(Segment("summary", summary + END_OF_TURN))
        for call in rest:
            second.add_call(call)
            result = sandbox.call(call.name, dict(call.arguments))
            if call.name == "finish":
                break
            second.add_result(tool_output_text(result.ok, result.output, result.error))
        second.end_turn()
    return [first, second]
