"""The demonstration mix, played in real composer-infra sandboxes: every behaviour ends as
its kind should (careful and recovering solve, having run the visible tests after their
last edit; careless runs nothing; each habit shows), the transcripts replay to the same
tool results, the messages claim nothing the transcript contradicts (judged by the real
communication reward), wrong first edits really fail the visible tests, and the shares
come from the config."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import pytest

from composer_infra.sandbox import TestReport, ToolResult
from composer_model import train_tokenizer
from composer_rewards.episode import Episode, Message, TestResults, ToolCall
from composer_rewards.rewards.communication import CommunicationReward
from composer_rewards.rewards.redundant_reads import redundant_reads
from composer_rewards.rewards.unfinished import placeholders
from composer_rl.agent.behaviours import Behaviour, DemonstrationMix
from composer_rl.agent.demonstrations import (
    RECALLED_NAMES,
    describe_edits,
    has_visible_tests,
    lost_path,
    play_demonstration,
    pytest_summary,
    visible_tests_fail,
)
from composer_rl.agent.episode import unified_diff
from composer_rl.agent.format import parse_output
from composer_rl.agent.mistakes import (
    apply_edits,
    declared_attempts,
    line_edit,
    mutations,
    with_todo,
    wrong_attempts,
)
from composer_rl.agent.oracle import Demonstration, summary_demonstration
from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox, workspace_files
from composer_rl.agent.transcript import tool_output_text
from composer_rl.stages.config import load_stage1_config
from composer_rl.stages.sft import demonstrations
from composer_rl.tasks import BUILTIN_TEMPLATES, Split
from composer_rl.tasks.invented import VALIDATION_WORDS
from composer_rl.tasks.model import VISIBLE_TEST_COMMAND, Category, Edit, Task
from composer_rl.tasks.templates.base import Params, Template
from composer_rl.tasks.templates.vocab import MODULES, names

# Hidden tests call the workspace through the grader's probe; the fallback keeps them
# running on a grader that does not write the probe yet.
PROBE = (
    "try:\n"
    "    from workspace_probe import call\n"
    "except ImportError:\n"
    "    import importlib\n\n"
    "    def call(module, name, *args):\n"
    "        return getattr(importlib.import_module(module), name)(*args)\n\n\n"
)


def _operator_task(task_id: str = "demo-operator", name_the_file: bool = False) -> Task:
    """`combine` subtracts where it should add; visible tests under tests/ catch it."""
    where = " in `mathops.py`" if name_the_file else ""
    return Task(
        id=task_id,
        category=Category.DEBUGGING,
        difficulty=1,
        instruction=f"`combine(a, b)`{where} should return `a + b` but returns `a - b`. Fix it.",
        files={
            "mathops.py": "def combine(a, b):\n    return a - b\n",
            "notes.py": "def describe():\n    return 'notes'\n",
            "tests/test_mathops.py": (
                "from mathops import combine\n\n\n"
                "def test_combine():\n    assert combine(7, 3) == 10\n\n\n"
                "def test_zero():\n    assert combine(0, 0) == 0\n"
            ),
        },
        tests={
            "_grading/test_task.py": PROBE + "def test_combine():\n"
            "    assert call('mathops', 'combine', 7, 3) == 10\n"
            "    assert call('mathops', 'combine', 2, 5) == 7\n"
        },
        solution=[Edit(path="mathops.py", old="return a - b", new="return a + b")],
        metadata={"context_files": ["mathops.py"]},
    )


def _helper_task() -> Task:
    """The symptom is in `orders.py`, the bug in `helpers.py`; the task declares the
    wrong-file mistake (a fix in the caller) the generic mutations cannot make."""
    caller = (
        "from helpers import line_cost\n\n\n"
        "def total(items):\n    return sum(line_cost(p, q) for p, q in items)\n"
    )
    wrong_caller = caller.replace("line_cost(p, q) for", "line_cost(p, q) * 1 for")
    return Task(
        id="demo-helper",
        category=Category.DEBUGGING,
        difficulty=1,
        instruction="`total` in `orders.py` returns wrong totals: `total([(2, 3)])` should "
        "be 6 (price times quantity). Find and fix the bug.",
        files={
            "helpers.py": "def line_cost(price, qty):\n    return price + qty\n",
            "orders.py": caller,
            "tests/test_orders.py": (
                "from orders import total\n\n\ndef test_total():\n"
                "    assert total([(2, 3)]) == 6\n    assert total([]) == 0\n"
            ),
        },
        tests={
            "_grading/test_task.py": PROBE + "def test_total():\n"
            "    assert call('orders', 'total', [(1, 4), (5, 2)]) == 14\n"
        },
        solution=[Edit(path="helpers.py", old="return price + qty", new="return price * qty")],
        metadata={
            "context_files": ["orders.py", "helpers.py"],
            "wrong_edits": [[{"path": "orders.py", "old": caller, "new": wrong_caller}]],
        },
    )


@dataclass
class Replay:
    """A demonstration's calls, parsed back from its text and played in a fresh sandbox."""

    calls: list[ToolCall]
    results: list[ToolResult]
    files: dict[str, str]
    report: TestReport
    message: str

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def last_edit(self) -> int:
        return max(i for i, c in enumerate(self.calls) if c.name in ("edit_file", "write_file"))

    def test_runs(self) -> list[int]:
        return [
            i
            for i, c in enumerate(self.calls)
            if c.name == "run" and c.arguments["command"] == VISIBLE_TEST_COMMAND
        ]


def replay(task: Task, demo: Demonstration) -> Replay:
    calls = parse_output(demo.transcript.text).calls
    assert all(c.ok for c in calls), calls
    results = []
    with open_sandbox(task) as sandbox:
        for call in calls:
            results.append(sandbox.call(call.name, dict(call.arguments)))
        files = workspace_files(sandbox, task)
        report = grade_sandbox(sandbox, task)
    recorded = [s.text for s in demo.transcript.segments if s.kind == "tool_output"]
    for call, result, text in zip(calls, results, recorded, strict=False):
        if call.name != "run":  # a run's output carries its timing
            assert tool_output_text(result.ok, result.output, result.error) in text
    assert calls[-1].name == "finish"
    return Replay(calls, results, files, report, str(calls[-1].arguments.get("message", "")))


def episode_of(task: Task, run: Replay) -> Episode:
    """The view the reward plugins read, as the RL loop builds it (`episode_view`)."""
    changed = {
        p: run.files.get(p)
        for p in set(task.files) | set(run.files)
        if task.files.get(p) != run.files.get(p)
    }
    return Episode(
        task=task.instruction,
        messages=(Message(role="user", content=task.instruction),),
        tool_calls=tuple(
            c.model_copy(update={"ok": r.ok, "output": r.output, "error": r.error})
            for c, r in zip(run.calls, run.results, strict=True)
        ),
        final_message=run.message,
        diff=unified_diff(task.files, run.files),
        changed_files=changed,
        test_results=TestResults(
            passed=run.report.passed,
            failed=run.report.failed,
            errors=run.report.errors,
            outcomes=run.report.outcomes,
        ),
    )


def communication(task: Task, run: Replay) -> tuple[str, float]:
    """(the communication component's details, the false_claim value)."""
    components = {c.name: c for c in CommunicationReward().composer_reward(episode_of(task, run))}
    assert components["false_claim"].value == 0, components["false_claim"].details
    return components["communication"].details, components["false_claim"].value


def _play(task: Task, behaviour: Behaviour, **mix: object) -> tuple[Demonstration, Replay]:
    """Play, then replay: the replay's end state is graded (`Replay.report`), so the
    demonstration itself need not be."""
    demo = play_demonstration(task, DemonstrationMix(**mix), behaviour)  # type: ignore[arg-type]
    return demo, replay(task, demo)


def test_careful_finds_the_code_edits_runs_the_tests_and_says_what_they_printed() -> None:
    task = _operator_task()
    demo, run = _play(task, Behaviour.CAREFUL)
    assert demo.kind == "careful" and run.report.all_passed
    assert run.names()[:3] == ["list_files", "run", "read_file"]
    assert run.calls[1].arguments["command"] == "grep -rn combine ."  # no file named
    assert run.test_runs() and run.test_runs()[-1] > run.last_edit()
    last = run.results[run.test_runs()[-1]]
    assert last.ok and pytest_summary(last.output) == "2 passed"
    assert run.message == (
        "I replaced `return a - b` with `return a + b` in `mathops.py` and ran the tests "
        f"(`{VISIBLE_TEST_COMMAND}`): 2 passed."
    )
    details, _ = communication(task, run)
    assert "how_checked" in details and "what_changed" in details
    assert redundant_reads(episode_of(task, run)) == []  # each file read once


def test_careful_searches_only_when_the_instruction_names_no_file() -> None:
    _, run = _play(_operator_task(name_the_file=True), Behaviour.CAREFUL)
    assert run.names()[:2] == ["list_files", "read_file"]


def test_recovering_fails_first_then_fixes_and_passes() -> None:
    task = _operator_task()
    demo, run = _play(task, Behaviour.RECOVERING)
    assert demo.kind == "recovering" and run.report.all_passed
    first, second = run.test_runs()
    assert not run.results[first].ok and "failed" in pytest_summary(run.results[first].output)
    assert run.results[second].ok and second > run.last_edit() > first
    assert demo.details["wrong"]["source"] == "mutation"
    assert demo.details["test_runs"] == ["1 failed, 1 passed", "2 passed"]
    assert "failed (`" in run.message and run.message.endswith("ran them again: 2 passed.")
    communication(task, run)
    assert redundant_reads(episode_of(task, run)) == []


def test_recovering_from_the_wrong_file_corrects_both_files() -> None:
    task = _helper_task()
    demo, run = _play(task, Behaviour.RECOVERING)
    assert demo.kind == "recovering" and demo.details["wrong"]["source"] == "task"
    assert run.report.all_passed and run.files == task.solved_files()
    first, second = run.test_runs()
    edited = {c.arguments["path"] for c in run.calls[first:second] if c.name == "edit_file"}
    assert edited == {"orders.py", "helpers.py"}  # the stray change undone, the bug fixed
    communication(task, run)
    assert redundant_reads(episode_of(task, run)) == []


def test_recovering_falls_back_to_careful_when_no_mistake_fails_the_tests() -> None:
    """Visible tests that only check `combine(0, 0)` cannot tell `a * b` or `a - b` from
    `a + b`: no candidate counts, and the demonstration is careful, saying why."""
    task = _operator_task()
    weak = "from mathops import combine\n\n\ndef test_zero():\n    assert combine(0, 0) == 0\n"
    task = task.model_copy(update={"files": {**task.files, "tests/test_mathops.py": weak}})
    demo = play_demonstration(task, behaviour=Behaviour.RECOVERING, grade=True)
    assert demo.kind == "careful" and demo.solved
    assert demo.details["fallback"] == "no candidate mistake fails the tests"
    assert demo.details["probes"] == len(wrong_attempts(task))


@pytest.mark.parametrize("wrong", [0.0, 1.0])
def test_careless_never_runs_anything(wrong: float) -> None:
    task = _operator_task()
    demo, run = _play(task, Behaviour.CARELESS, careless_wrong=wrong)
    assert demo.kind == "careless" and "run" not in run.names()
    assert run.names() == ["read_file", "edit_file", "finish"]
    assert run.report.all_passed is (wrong == 0.0)
    if wrong:
        assert visible_tests_fail(task, run.files)  # the edit is a real mistake
    details, _ = communication(task, run)  # describes the edit, claims no check
    assert "how_checked" not in details


def test_todo_left_solves_and_leaves_a_todo_in_the_diff() -> None:
    task = _operator_task()
    demo, run = _play(task, Behaviour.TODO_LEFT)
    assert demo.kind == "todo_left" and run.report.all_passed
    found = placeholders(episode_of(task, run))
    assert found and found[0].startswith("mathops.py:") and "TODO" in found[0]
    assert run.test_runs()[-1] > run.last_edit()


def test_unchecked_message_says_nothing_about_the_check() -> None:
    task = _operator_task()
    demo, run = _play(task, Behaviour.UNCHECKED_MESSAGE)
    assert demo.kind == "unchecked_message" and run.report.all_passed and run.test_runs()
    assert run.message in ("Done.", "Done!", "Finished.")
    details, _ = communication(task, run)
    assert "how_checked" not in details


def test_reread_reads_a_file_twice_in_a_row() -> None:
    task = _operator_task()
    demo, run = _play(task, Behaviour.REREAD)
    assert demo.kind == "reread" and run.report.all_passed
    reads = [i for i, c in enumerate(run.calls) if c.name == "read_file"]
    assert reads[1] == reads[0] + 1
    assert run.calls[reads[0]] == run.calls[reads[1]]
    # The `redundant_reads` reward (and the `reread` monitor) charges that read, only it.
    found = redundant_reads(episode_of(task, run))
    assert [(r.index, r.first) for r in found] == [(reads[1], reads[0])]
    assert run.results[reads[0]].output == run.results[reads[1]].output


@pytest.mark.parametrize(
    ("behaviour", "solves"),
    [(Behaviour.CAREFUL, True), (Behaviour.RECOVERING, True), (Behaviour.CARELESS, False)],
)
def test_a_lost_read_fails_then_lists_and_reads_the_right_file(
    behaviour: Behaviour, solves: bool
) -> None:
    """The missing path's error is the sandbox's own; the demonstration then lists the
    files and reads the right one, and ends as its behaviour does (careless: wrong, untested)."""
    task = _operator_task()
    demo, run = _play(task, behaviour, lost_read=1.0, careless_wrong=1.0)
    lost = demo.details["lost_read"]
    assert lost not in task.files and lost.endswith(".py")
    reads = [i for i, c in enumerate(run.calls) if c.name == "read_file"]
    first = reads[0]
    assert run.calls[first].arguments["path"] == lost and not run.results[first].ok
    assert "does not exist" in (run.results[first].error or "")
    assert run.names()[first + 1 : first + 3] == ["list_files", "read_file"]
    assert run.calls[first + 2].arguments["path"] == "mathops.py" and run.results[first + 2].ok
    assert demo.kind == behaviour.value and run.report.all_passed is solves
    assert bool(run.test_runs()) is solves  # careless runs nothing
    # A missing file read nothing: the `redundant_reads` reward charges no read here.
    assert redundant_reads(episode_of(task, run)) == []


def test_lost_paths_are_recalled_or_blended_names_the_repository_lacks() -> None:
    task = _operator_task()
    mix = DemonstrationMix(lost_read=1.0)
    seen = {lost_path(task, mix.rng(f"t{i}", "lost_read")) for i in range(80)}
    assert None not in seen
    stems = {str(p).removesuffix(".py") for p in seen}
    assert not {f"{s}.py" for s in stems} & set(task.files) and "mathops" not in stems
    recalled = stems & set(RECALLED_NAMES)
    blended = {s for s in stems - recalled if s[:2] == "ma"}
    assert recalled and blended and recalled | blended == stems
    assert all(any(s[k:] == r[k:] for r in RECALLED_NAMES for k in (2, 3)) for s in blended)
    # Never a name of the held-out split, nor of the validation words.
    assert not set(RECALLED_NAMES) & set(names(MODULES, Split.HELDOUT))
    assert not set(RECALLED_NAMES) & set(VALIDATION_WORDS)
    # The share, drawn apart from the behaviour, and off by default.
    assert not any(DemonstrationMix().read_is_lost(t) for t in SHARE_IDS)
    quarter = DemonstrationMix(lost_read=0.25)
    observed = sum(quarter.read_is_lost(t) for t in SHARE_IDS) / len(SHARE_IDS)
    assert abs(observed - 0.25) <= _tolerance(0.25, len(SHARE_IDS))
    lost = [t for t in SHARE_IDS if quarter.read_is_lost(t)]
    kinds = Counter(quarter.behaviour_of(t) for t in lost)
    assert len(kinds) >= 4  # every behaviour takes lost reads, not one kind
    with pytest.raises(ValueError, match="lost_read"):
        DemonstrationMix(lost_read=1.5)
    config = load_stage1_config(None, **{"sft.demonstrations.lost_read": 0.3})
    assert config.sft.demonstrations.lost_read == 0.3


def test_wrong_edit_mutations_apply_and_the_chosen_ones_fail_the_visible_tests() -> None:
    task = _operator_task()
    attempts = mutations(task)
    assert {a.what for a in attempts} == {"`*` for `+` in mathops.py"}
    for attempt in attempts:
        files = apply_edits(dict(task.files), attempt.edits)
        assert files is not None and files != task.solved_files()
        assert visible_tests_fail(task, files)
    assert not visible_tests_fail(task, task.solved_files())
    assert not visible_tests_fail(task, {**task.files, "tests/test_mathops.py": "x = (\n"})


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        ("return n + 1", {"return n", "return n - 1", "return n * 1"}),
        ("return xs[0]", {"return xs[-1]", "return min(xs)"}),
        ("return max(xs)", {"return min(xs)", "return sum(xs)", "return len(xs)"}),
        ("return a < b", {"return a <= b"}),
        ("return sorted(xs) if sort else xs", set()),
        ("flag = True  # a + b", {"flag = False  # a + b"}),
        ("text = 'a + b'", set()),
    ],
)
def test_generic_mistakes_are_the_classic_ones(new: str, expected: set[str]) -> None:
    task = _operator_task().model_copy(
        update={"solution": [Edit(path="mathops.py", old="return a - b", new=new)]}
    )
    made = {a.edits[0].new for a in mutations(task)}
    assert expected <= made
    if len(expected) <= 1:  # nothing inside a string or a comment is mutated
        assert made == expected


def test_the_wrong_file_for_an_answer_names_another_file() -> None:
    task = _operator_task().model_copy(
        update={"solution": [Edit(path="answer.txt", new="mathops.py\n")]}
    )
    assert {a.edits[0].new for a in mutations(task)} == {"notes.py\n"}


def test_a_template_declares_its_own_wrong_edits() -> None:
    class Doubling(Template):
        name: ClassVar[str] = "doubling"
        category: ClassVar[Category] = Category.DEBUGGING
        difficulty: ClassVar[int] = 1

        def parameter_space(self) -> list[Params]:
            return [{"k": 2}]

        def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
            files = {"m.py": "def f(x):\n    return x\n"}
            tests = {"_grading/test_t.py": "def test_t():\n    pass\n"}
            return "Double it.", files, tests, [Edit(path="m.py", old="x\n", new="x * 2\n")]

        def wrong_edits(self, params: Params) -> list[list[Edit]]:
            return [[Edit(path="m.py", old="x\n", new="x + 2\n")], [Edit(path="zz.py", new="")]]

    task = Doubling().build({"k": 2})
    declared = declared_attempts(task, templates=[Doubling()])
    assert [a.source for a in declared] == ["template", "template"]
    # The one that creates a file the solution lacks cannot be undone with the tools.
    kept = wrong_attempts(task, templates=[Doubling()])
    assert kept[0].edits[0].new == "x + 2\n" and kept[0].source == "template"
    assert all(a.edits[0].path == "m.py" for a in kept)


def test_line_edit_is_the_smallest_unique_change() -> None:
    before = "a = 1\nb = 1\nc = 2\n"
    edit = line_edit("f.py", before, "a = 1\nb = 3\nc = 2\n")
    assert (edit.old, edit.new) == ("b = 1", "b = 3")
    repeated = "x = 1\nx = 1\n"
    edit = line_edit("f.py", repeated, "x = 1\nx = 2\n")
    assert edit.apply({"f.py": repeated})["f.py"] == "x = 1\nx = 2\n"


def test_todo_comment_leaves_the_code_unchanged_or_is_not_made() -> None:
    task = _operator_task()
    marked = with_todo(task, DemonstrationMix().rng(task.id, "todo"))
    assert marked is not None
    edits, note = marked
    assert note.startswith("TODO") and note in edits[0].new
    answer = task.model_copy(update={"solution": [Edit(path="answer.txt", new="3\n")]})
    assert with_todo(answer, DemonstrationMix().rng(answer.id, "todo")) is None
    demo = play_demonstration(answer, behaviour=Behaviour.TODO_LEFT)
    assert demo.kind == "careful" and "TODO" in demo.details["fallback"]


def test_a_todo_that_fails_the_visible_tests_falls_back_to_careful() -> None:
    """A visible test that counts the file's lines (as a review's `path:line` does) fails
    once the comment is in: the habit is not played, rather than finishing on a failure."""
    task = _operator_task()
    counting = (
        "def test_two_lines():\n    assert len(open('mathops.py').read().splitlines()) == 2\n"
    )
    task = task.model_copy(update={"files": {**task.files, "tests/test_lines.py": counting}})
    demo = play_demonstration(task, behaviour=Behaviour.TODO_LEFT)
    assert demo.kind == "careful" and demo.details["fallback"].startswith("the TODO comment")
    assert demo.details["tests_passed_last"]


def test_messages_quote_no_code_that_names_a_file_left_unchanged() -> None:
    """`Path("lib/x.py")` in a message reads as a change to `lib/x.py`: name the file."""
    files = {"check.py": 'ROOT = Path("lib/x.py")\n'}
    edit = Edit(path="check.py", old='Path("lib/x.py")', new='Path("src/x.py")')
    assert describe_edits([edit], files) == "edited `check.py`"
    plain = Edit(path="check.py", old="ROOT", new="BASE")
    assert describe_edits([plain], files) == "replaced `ROOT` with `BASE` in `check.py`"


SHARE_IDS = [f"synthetic-{i}" for i in range(600)]


def _tolerance(share: float, n: int) -> float:
    """Four binomial standard errors (the draw is a hash, so this is a fixed outcome, but a
    different id set must pass too)."""
    return 4 * math.sqrt(share * (1 - share) / n) + 1e-9


@pytest.mark.parametrize(
    "overrides",
    [{}, {"careful": 0.1, "recovering": 0.5, "careless": 0.1, "seed": 7}, {"reread": 0.0}],
)
def test_the_counts_follow_the_configured_shares(overrides: dict[str, float]) -> None:
    config = load_stage1_config(
        None, **{f"sft.demonstrations.{k}": v for k, v in overrides.items()}
    )
    mix = config.sft.demonstrations
    counts = Counter(mix.behaviour_of(task_id) for task_id in SHARE_IDS)
    for behaviour, share in mix.shares().items():
        observed = counts[behaviour] / len(SHARE_IDS)
        assert abs(observed - share) <= _tolerance(share, len(SHARE_IDS)), (behaviour, observed)
    assert sum(counts.values()) == len(SHARE_IDS)


def test_changing_the_config_changes_the_behaviours() -> None:
    default = DemonstrationMix()
    careful = DemonstrationMix.only("careful")
    reseeded = DemonstrationMix(seed=1)
    assert {careful.behaviour_of(t) for t in SHARE_IDS} == {Behaviour.CAREFUL}
    assert [default.behaviour_of(t) for t in SHARE_IDS] == [
        DemonstrationMix().behaviour_of(t) for t in SHARE_IDS
    ]  # deterministic
    assert [default.behaviour_of(t) for t in SHARE_IDS] != [
        reseeded.behaviour_of(t) for t in SHARE_IDS
    ]


def test_shares_are_normalised_and_validated() -> None:
    mix = DemonstrationMix.model_validate(
        {"careful": 2, "careless": 1, "recovering": 0, "todo_left": 0}
        | {"unchecked_message": 0, "reread": 0}
    )
    assert mix.shares()[Behaviour.CAREFUL] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match=r"demonstrations\.recovering = -0\.1: a share must"):
        load_stage1_config(None, **{"sft.demonstrations.recovering": -0.1})
    with pytest.raises(ValueError, match="every share is 0"):
        DemonstrationMix.model_validate({b.value: 0 for b in Behaviour})
    with pytest.raises(ValueError, match="careless_wrong"):
        DemonstrationMix(careless_wrong=1.5)
    with pytest.raises(ValueError, match="extra"):
        DemonstrationMix.model_validate({"carefull": 1})


def test_the_stage_one_cli_flags_reach_the_mix() -> None:
    from composer_rl.cli import build_parser
    from composer_rl.cli._stage_args import stage1_config

    for command in ("sft", "stage1"):
        flags = ["--sft.demonstrations.careful", "1", "--sft.demonstrations.recovering", "0"]
        # --demo-seed: the short spelling of sft.demonstrations.seed
        args = build_parser().parse_args([command, *flags, "--demo-seed", "3"])
        mix = stage1_config(args).sft.demonstrations
        assert (mix.careful, mix.recovering, mix.seed) == (1.0, 0.0, 3)


def test_stage_one_demonstrations_count_each_kind_and_keep_the_summaries() -> None:
    tasks = [_operator_task(f"demo-{i}") for i in range(4)]
    mix = DemonstrationMix.model_validate(
        {b.value: 0.0 for b in Behaviour} | {"careful": 1.0, "careless": 1.0, "seed": 0}
    )
    expected = Counter(mix.behaviour_of(t.id).value for t in tasks)
    assert set(expected) == {"careful", "careless"}  # this seed deals both
    tokenizer = train_tokenizer([t.instruction + "".join(t.files.values()) for t in tasks] * 3, 400)
    ids, masks, counts = demonstrations(
        tasks, tokenizer, show_progress=False, summary_every=2, mix=mix, workers=2
    )
    kinds = {k: n for k, n in counts.items() if ":" not in k}
    assert kinds == dict(expected) and sum(kinds.values()) == len(tasks)
    assert counts.get("careless:wrong", 0) <= expected["careless"]
    assert len(ids) == len(masks) == len(tasks) + 2 * 2  # two tasks also self-summarized
    first, second = summary_demonstration(tasks[0])
    assert first.segments[-1].kind == "summary" and second.segments[-1].kind == "final_message"


FAST = ["fix_operator", "find_definition", "float_money"]
"""Two one-file templates and a change across three files (issue 31)."""


@pytest.mark.parametrize("name", FAST)
def test_builtin_careful_and_recovering_demonstrations_solve(name: str) -> None:
    """Graded on the replayed end state by the sandbox grader."""
    template = next(t for t in BUILTIN_TEMPLATES if t.name == name)
    task = next(iter(template.tasks(Split.TRAIN)))
    for behaviour in (Behaviour.CAREFUL, Behaviour.RECOVERING):
        demo = play_demonstration(task, behaviour=behaviour)
        run = replay(task, demo)
        assert run.report.all_passed, (behaviour, demo.details, run.report.output)
        if has_visible_tests(task):
            assert run.test_runs() and run.test_runs()[-1] > run.last_edit()
            assert run.results[run.test_runs()[-1]].ok, demo.details
        else:
            assert demo.kind == "careful" and not run.test_runs()
