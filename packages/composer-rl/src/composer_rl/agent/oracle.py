"""Oracle demonstrations: the tool calls that solve a task, played in a real sandbox.

The oracle reads the task's context files, applies its edits (`edit_file` for a
replacement, `write_file` for a whole file) and finishes. Playing the calls in a
composer-infra sandbox gives the tool results exactly as the policy will see them, and
grading the end state proves the demonstration correct before anyone trains on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_rl.agent.format import ToolCall
from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox
from composer_rl.agent.transcript import Transcript, tool_output_text
from composer_rl.tasks.model import Task

FINISH_MESSAGE = "Done."


def oracle_calls(task: Task) -> list[ToolCall]:
    calls = [ToolCall("read_file", {"path": p}) for p in task.metadata.get("context_files", [])]
    for edit in task.solution:
        if edit.old is None:
            calls.append(ToolCall("write_file", {"path": edit.path, "content": edit.new}))
        else:
            calls.append(
                ToolCall("edit_file", {"path": edit.path, "old": edit.old, "new": edit.new})
            )
    calls.append(ToolCall("finish", {"message": FINISH_MESSAGE}))
    return calls


@dataclass
class Demonstration:
    task_id: str
    transcript: Transcript
    solved: bool
    test_output: str


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
