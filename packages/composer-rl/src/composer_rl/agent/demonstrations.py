"""Stage one's demonstrations: a seeded mix of behaviours, each played in a real sandbox.

Which behaviours, why a mix, and how each task's is chosen: `composer_rl.agent.behaviours`.
Every demonstration is a sequence of tool calls played in a composer-infra sandbox like
`play_oracle`'s, so every tool result in the transcript (a listing, a search, a file, a
test run's output) is the real one, and every final message is written from what the
episode actually did and saw: a message says the tests pass only after a run that passed,
and names the numbers that run printed.

What each behaviour plays:

- careful: `list_files`; a search (`grep -rn NAME .`) when the instruction names no file;
  read the files the task is about; the oracle's edits; the visible tests
  (`VISIBLE_TEST_COMMAND`); finish with what changed and what the run printed.
- recovering: the same opening; a wrong first attempt (`composer_rl.agent.mistakes`) that
  makes the visible tests fail, checked in a scratch sandbox before it is used; the failing
  run; the correction as a line edit; a passing run; a message that says what failed first
  and what passes now. `play_recovering_from` plays the same with a given attempt (the
  policy's own, `composer_rl.agent.own_mistakes`, for stage one's second SFT round).
- careless: read, the edits (or, in `careless_wrong` of them, a wrong attempt), finish with
  a message that describes the edit and claims no check; nothing is run.
- todo_left / unchecked_message / reread: careful, with a TODO comment added by the fix
  (checked in a scratch sandbox to leave the visible tests passing), "Done." as the
  message, or the first file read twice in a row.
- with a lost read (`DemonstrationMix.lost_read`, any behaviour): before its first read, a
  read of a path the repository lacks (`lost_path`: a recalled name, or the right name's
  start run on into one), the tool's error, `list_files`, and then the reads it would
  have made.

A behaviour that cannot be played on a task falls back to careful, and the demonstration
records why (`details["fallback"]`): recovering when no candidate mistake fails the visible
tests (or the repository has none), todo_left when no Python file takes a comment (or the
comment fails the visible tests). A task without visible tests gets careful
demonstrations that run nothing and say nothing about checks. No demonstration reads or
runs the hidden tests; `grade=True` grades the end state with them afterwards, as
`play_oracle` does.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from composer_infra.sandbox import Sandbox, ToolResult
from composer_rewards import ToolCall
from composer_rl.agent.behaviours import Behaviour, DemonstrationMix
from composer_rl.agent.mistakes import (
    WrongAttempt,
    apply_edits,
    corrections,
    with_todo,
    wrong_attempts,
)
from composer_rl.agent.oracle import Demonstration
from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox, sandbox_task
from composer_rl.agent.transcript import Transcript, tool_output_text
from composer_rl.tasks.invented import TRAINING_WORDS
from composer_rl.tasks.model import VISIBLE_TEST_COMMAND, VISIBLE_TESTS_DIR, Edit, Split, Task
from composer_rl.tasks.templates.vocab import MODULES, names

UNCHECKED_MESSAGES: tuple[str, ...] = ("Done.", "Done!", "Finished.")
"""Final messages that say nothing about what changed or how it was checked."""

TESTS_FAILED_EXIT_CODE = 1
"""pytest's exit code when tests ran and some failed (2-5: interrupted, usage, no tests)."""


def has_visible_tests(task: Task) -> bool:
    """Whether the repository carries tests of its own that the agent may run."""
    return any(path.startswith(VISIBLE_TESTS_DIR + "/") for path in task.files)


def pytest_summary(output: str) -> str:
    """What a pytest run's last line says ("3 passed", "1 failed, 2 passed"), without the
    timing; the exit status in words when there is no such line."""
    for line in reversed(output.strip().splitlines()):
        match = re.search(r"(\d+ [a-z]+(?:, \d+ [a-z]+)*)(?: in [\d.]+s)?", line.strip("= "))
        if match and re.search(r"passed|failed|error|skipped|xfail|deselected", line):
            return match.group(1)
        if "no tests ran" in line:
            return "no tests ran"
    return "no summary line"


_FILE_NAME = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)*[\w.-]*[A-Za-z_][\w-]*\.(?:py|pyi|md|rst|txt|toml|cfg|ini|json|"
    r"ya?ml|diff|sh|csv|lock|xml|html)(?![\w/])"
)
"""A file name inside text, as a reader (and composer-rewards' communication reward) sees
one: a message that quotes `Path("lib/x.py")` reads as saying it changed `lib/x.py`."""


def _touched(name: str, changed: Collection[str]) -> bool:
    return any(c == name or c.endswith("/" + name) or name.endswith("/" + c) for c in changed)


def _code(text: str, changed: Collection[str], limit: int = 70) -> str | None:
    """`text` as inline code when it is one short line that names no file the episode
    left unchanged, else None (the message then names the file, not the code)."""
    text = text.strip()
    if not text or "\n" in text or "`" in text or len(text) > limit:
        return None
    if any(not _touched(m.group(0), changed) for m in _FILE_NAME.finditer(text)):
        return None
    return f"`{text}`"


def _and(parts: Sequence[str]) -> str:
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def changed_paths(files: dict[str, str], edits: Sequence[Edit]) -> list[str]:
    """The files `edits` leave different from `files`."""
    after = apply_edits(dict(files), edits) or {}
    return [p for p in sorted(after) if files.get(p) != after[p]]


def describe_edits(edits: Sequence[Edit], files: dict[str, str]) -> str:
    """What `edits` did to the repository `files`, as a clause after "I ..."."""
    changed = changed_paths(files, edits)
    parts: list[str] = []
    for edit in edits:
        old, new = _code(edit.old or "", changed), _code(edit.new, changed)
        if edit.old is not None and old and new:
            part = f"replaced {old} with {new} in `{edit.path}`"
        elif edit.old is not None:
            part = f"edited `{edit.path}`"
        elif edit.path in files:
            part = f"rewrote `{edit.path}`"
        else:
            part = f"created `{edit.path}`"
        if part not in parts:
            parts.append(part)
    return _and(parts) or "changed nothing"


def names_a_file(task: Task) -> bool:
    """Whether the instruction names one of the repository's files."""
    return any(
        path in task.instruction or PurePosixPath(path).name in task.instruction
        for path in task.files
    )


def search_name(task: Task) -> str | None:
    """A name from the instruction worth searching the repository for: the first one in
    backticks that is an identifier and occurs in a file outside the visible tests."""
    sources = [t for p, t in task.files.items() if not p.startswith(VISIBLE_TESTS_DIR + "/")]
    for quoted in re.findall(r"`([^`]+)`", task.instruction):
        name = quoted.split("(")[0].strip().split(".")[-1]
        if re.fullmatch(r"[A-Za-z_]\w*", name) and any(name in text for text in sources):
            return name
    return None


def read_paths(task: Task) -> list[str]:
    """The files a demonstration reads: the task's context files, else the existing files
    the oracle edits."""
    context = [p for p in task.metadata.get("context_files", []) if p in task.files]
    if context:
        return context
    edited = [e.path for e in task.solution if e.path in task.files]
    return list(dict.fromkeys(edited))


RECALLED_NAMES = (*names(MODULES, Split.TRAIN), *TRAINING_WORDS)
"""Names a policy writes in place of the one it read: module names of training tasks and
the words of the invented-name demonstrations. Held-out names never enter a demonstration."""


def lost_path(task: Task, rng: random.Random) -> str | None:
    """A path to read by mistake, which the repository lacks, of the kinds the SFT policies
    of 2026-12-05 read (docs/rl/2026-12-05-failed-read-loops.md): a recalled name
    (`RECALLED_NAMES`), or the right name's first two or three letters run on into a
    recalled one (`brush.py` -> `brigh.py`), half of each. In the folder of the first file the
    demonstration reads; None when it reads no file."""
    reads = read_paths(task)
    if not reads:
        return None
    right = PurePosixPath(reads[0])
    stem, suffix = right.stem, right.suffix or ".py"
    for _ in range(20):
        other = rng.choice(RECALLED_NAMES)
        keep = rng.randint(2, 3)
        kind = rng.choice(("recalled", "blend"))
        name = other if kind == "recalled" else stem[:keep] + other[keep:]
        path = str(right.with_name(name + suffix))
        if name != stem and len(name) > keep and path not in task.files:
            return path
    return None


def edit_call(edit: Edit) -> ToolCall:
    if edit.old is None:
        return ToolCall(name="write_file", arguments={"path": edit.path, "content": edit.new})
    return ToolCall(
        name="edit_file", arguments={"path": edit.path, "old": edit.old, "new": edit.new}
    )


@dataclass
class Player:
    """Plays tool calls in a sandbox and writes them, with their real results, into the
    transcript."""

    sandbox: Sandbox
    transcript: Transcript
    calls: list[ToolCall] = field(default_factory=list)

    def call(self, call: ToolCall) -> ToolResult:
        self.transcript.add_call(call)
        self.calls.append(call)
        result = self.sandbox.call(call.name, dict(call.arguments))
        self.transcript.add_result(tool_output_text(result.ok, result.output, result.error))
        return result

    def edits(self, edits: Sequence[Edit]) -> None:
        for edit in edits:
            self.call(edit_call(edit))

    def run_tests(self) -> ToolResult:
        return self.call(ToolCall(name="run", arguments={"command": VISIBLE_TEST_COMMAND}))

    def finish(self, message: str) -> None:
        call = ToolCall(name="finish", arguments={"message": message})
        self.transcript.add_call(call)
        self.calls.append(call)
        self.sandbox.call("finish", {"message": message})
        self.transcript.end_turn()


def visible_run(task: Task, files: dict[str, str], backend: str | None = None) -> ToolResult:
    """The visible tests run in a scratch sandbox holding `files` (not recorded anywhere).

    Stage one plays demonstrations outside any plugin job (it takes no plugin requests):
    `backend` is looked up in composer-infra's standalone default."""
    with Sandbox.create(sandbox_task(task, files), backend, registry=None) as sandbox:
        return sandbox.call("run", {"command": VISIBLE_TEST_COMMAND})


def tests_failed(result: ToolResult) -> bool:
    """Whether a visible-test run ran and some tests failed (an import or collection error
    is not the failing test a mistake makes)."""
    return not result.ok and result.data.get("exit_code") == TESTS_FAILED_EXIT_CODE


def visible_tests_fail(task: Task, files: dict[str, str], backend: str | None = None) -> bool:
    """Whether the visible tests fail on `files` (ran, and some failed: an import or
    collection error is not the failing test a mistake makes)."""
    return tests_failed(visible_run(task, files, backend))


def failing_attempt(
    task: Task, mix: DemonstrationMix, backend: str | None = None
) -> tuple[WrongAttempt | None, int]:
    """The first candidate wrong attempt (`wrong_attempts`, in a seeded order) after which
    the visible tests fail, and how many were tried (at most `mix.max_wrong_probes`)."""
    candidates = wrong_attempts(task, mix.rng(task.id, "mistake"))
    tried = 0
    for attempt in candidates[: mix.max_wrong_probes]:
        files = apply_edits(dict(task.files), attempt.edits)
        if files is None:
            continue
        tried += 1
        if visible_tests_fail(task, files, backend):
            return attempt, tried
    return None, tried


def _read(player: Player, task: Task, plan: Plan, reread: bool = False) -> None:
    """The reads of `task`'s files; with a lost read planned, first the missing path, its
    error and a listing to find the right one."""
    if (lost := plan.details.get("lost_read")) is not None:
        if player.call(ToolCall(name="read_file", arguments={"path": lost})).ok:
            raise RuntimeError(f"{task.id}: the lost read's {lost!r} exists")
        player.call(ToolCall(name="list_files", arguments={}))
    for index, path in enumerate(read_paths(task)):
        player.call(ToolCall(name="read_file", arguments={"path": path}))
        if reread and index == 0:
            player.call(ToolCall(name="read_file", arguments={"path": path}))


def _look_around(player: Player, task: Task, plan: Plan, reread: bool = False) -> None:
    player.call(ToolCall(name="list_files", arguments={}))
    if not names_a_file(task) and (name := search_name(task)):
        player.call(ToolCall(name="run", arguments={"command": f"grep -rn {name} ."}))
    _read(player, task, plan, reread)


def _checked_message(changed: str, run: ToolResult | None) -> str:
    if run is None:
        return f"I {changed}."
    return (
        f"I {changed} and ran the tests (`{VISIBLE_TEST_COMMAND}`): {pytest_summary(run.output)}."
    )


def _recovered_message(
    task: Task, fix: Sequence[Edit], first: ToolResult, second: ToolResult
) -> str:
    """What failed first and what passes now. Only files the episode's diff touches are
    named as changed: a stray first edit that the fix undid is not a change to report."""
    failed = f"the tests failed (`{VISIBLE_TEST_COMMAND}`: {pytest_summary(first.output)})"
    after = pytest_summary(second.output)
    changed = changed_paths(task.files, task.solution)
    if len(fix) == 1 and fix[0].old is not None and fix[0].path in changed:
        wrong, right = _code(fix[0].old, changed), _code(fix[0].new, changed)
        if wrong and right:
            return (
                f"My first edit left {wrong} in `{fix[0].path}`, and {failed}. "
                f"I changed it to {right} and ran them again: {after}."
            )
    paths = _and([f"`{p}`" for p in changed])
    return (
        f"My first attempt was wrong, and {failed}. I fixed {paths} instead and ran them "
        f"again: {after}."
    )


@dataclass
class Plan:
    """What a demonstration will do, decided before its sandbox opens: the behaviour it
    plays (after any fallback), the edits it makes, and its wrong first attempt, if any."""

    kind: Behaviour
    edits: list[Edit]
    attempt: WrongAttempt | None
    details: dict[str, Any]


def plan_demonstration(
    task: Task, mix: DemonstrationMix, planned: Behaviour, backend: str | None = None
) -> Plan:
    """Choose the mistake (probed against the visible tests in scratch sandboxes) or the
    TODO, and fall back to careful where the behaviour cannot be played on `task`."""
    tested = has_visible_tests(task)
    plan = Plan(planned, list(task.solution), None, {"planned": planned.value})
    plan.details["visible_tests"] = tested
    if planned is Behaviour.RECOVERING:
        if tested:
            plan.attempt, plan.details["probes"] = failing_attempt(task, mix, backend)
        if plan.attempt is None:
            plan.kind = Behaviour.CAREFUL
            plan.details["fallback"] = (
                "no visible tests" if not tested else "no candidate mistake fails the tests"
            )
    elif planned is Behaviour.CARELESS and mix.careless_is_wrong(task.id):
        if tested:
            plan.attempt, plan.details["probes"] = failing_attempt(task, mix, backend)
        else:  # nothing to check a mistake against: the first candidate, unverified
            plan.attempt = next(iter(wrong_attempts(task, mix.rng(task.id, "mistake"))), None)
        if plan.attempt is not None:
            plan.edits = list(plan.attempt.edits)
    elif planned is Behaviour.TODO_LEFT:
        marked = with_todo(task, mix.rng(task.id, "todo"))
        if marked is None:
            plan.kind = Behaviour.CAREFUL
            plan.details["fallback"] = "no Python file takes a TODO comment"
        elif tested and not visible_run(task, apply_edits(dict(task.files), marked[0]) or {}).ok:
            # e.g. a review whose `path:line` the comment shifts: the habit must not fail.
            plan.kind = Behaviour.CAREFUL
            plan.details["fallback"] = "the TODO comment fails the visible tests"
        else:
            plan.edits, plan.details["todo"] = marked
    if plan.attempt is not None:
        plan.details["wrong"] = {"source": plan.attempt.source, "what": plan.attempt.what}
    if mix.read_is_lost(task.id) and (lost := lost_path(task, mix.rng(task.id, "lost_read"))):
        plan.details["lost_read"] = lost
    return plan


def _play_careless(player: Player, task: Task, plan: Plan) -> list[ToolResult]:
    _read(player, task, plan)
    player.edits(plan.edits)
    player.finish(f"I {describe_edits(plan.edits, task.files)}.")
    return []


def _play_recovering(player: Player, task: Task, plan: Plan) -> list[ToolResult]:
    assert plan.attempt is not None
    _look_around(player, task, plan)
    player.edits(plan.attempt.edits)
    first = player.run_tests()
    wrong_files = apply_edits(dict(task.files), plan.attempt.edits) or {}
    fix = corrections(wrong_files, task.solved_files()) or []
    player.edits(fix)
    second = player.run_tests()
    player.finish(_recovered_message(task, fix, first, second))
    return [first, second]


def _play_careful(
    player: Player, task: Task, plan: Plan, mix: DemonstrationMix
) -> list[ToolResult]:
    """Careful, and the habits, which are careful with one thing done otherwise."""
    _look_around(player, task, plan, reread=plan.kind is Behaviour.REREAD)
    player.edits(plan.edits)
    runs = [player.run_tests()] if plan.details["visible_tests"] else []
    if plan.kind is Behaviour.UNCHECKED_MESSAGE:
        message = mix.rng(task.id, "message").choice(UNCHECKED_MESSAGES)
    else:
        message = _checked_message(
            describe_edits(plan.edits, task.files), runs[-1] if runs else None
        )
    player.finish(message)
    return runs


def play_demonstration(
    task: Task,
    mix: DemonstrationMix | None = None,
    behaviour: Behaviour | str | None = None,
    backend: str | None = None,
    grade: bool = False,
) -> Demonstration:
    """Play `task`'s demonstration of `behaviour` (default: the one `mix` deals the task) in
    a sandbox; `kind` is the behaviour played, after any fallback (`details` says why)."""
    mix = mix or DemonstrationMix()
    planned = Behaviour(behaviour) if behaviour is not None else mix.behaviour_of(task.id)
    plan = plan_demonstration(task, mix, planned, backend)
    return play_plan(task, plan, mix, backend, grade)


def play_recovering_from(
    task: Task, attempt: WrongAttempt, backend: str | None = None, grade: bool = False
) -> Demonstration:
    """A recovering demonstration that opens with `attempt` (e.g. the policy's own failed
    attempt, `composer_rl.agent.own_mistakes`) instead of one `failing_attempt` chooses:
    look around, the attempt, the failing visible run, the correction to the oracle's
    state, the passing run, the message. The caller has checked that the visible tests fail
    after `attempt` (`details["test_runs"]` shows what they printed here)."""
    plan = Plan(
        Behaviour.RECOVERING,
        list(task.solution),
        attempt,
        {
            "planned": Behaviour.RECOVERING.value,
            "visible_tests": has_visible_tests(task),
            "wrong": {"source": attempt.source, "what": attempt.what},
        },
    )
    return play_plan(task, plan, backend=backend, grade=grade)


def play_plan(
    task: Task,
    plan: Plan,
    mix: DemonstrationMix | None = None,
    backend: str | None = None,
    grade: bool = False,
) -> Demonstration:
    """Play a planned demonstration in a sandbox (`plan_demonstration`, or a plan made
    elsewhere, as `play_recovering_from`'s); `grade` grades its end state afterwards."""
    mix = mix or DemonstrationMix()
    transcript = Transcript.start(task.instruction)
    with open_sandbox(task, backend) as sandbox:
        player = Player(sandbox, transcript)
        if plan.kind is Behaviour.CARELESS:
            runs = _play_careless(player, task, plan)
        elif plan.kind is Behaviour.RECOVERING:
            runs = _play_recovering(player, task, plan)
        else:
            runs = _play_careful(player, task, plan, mix)
        report = grade_sandbox(sandbox, task) if grade else None
    return Demonstration(
        task_id=task.id,
        transcript=transcript,
        solved=bool(report and report.all_passed),
        test_output=report.output if report else "",
        kind=plan.kind.value,
        details={
            **plan.details,
            "test_runs": [pytest_summary(r.output) for r in runs],
            "tests_passed_last": bool(runs) and runs[-1].ok,
            "tests_failed_first": bool(runs) and tests_failed(runs[0]),
            "calls": [c.name for c in player.calls],
        },
    )
