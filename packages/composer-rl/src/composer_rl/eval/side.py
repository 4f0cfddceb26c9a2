"""The five side evaluations of the report, each a small graded set with its own score.

* intent: an ambiguous instruction; the right move is a clarifying question. Score 1 for
  no edit and a question in the final message, 0 otherwise. (Until side-v2 no edit without a
  question scored 0.5, so the do-nothing baseline earned 0.5 on every task.)
* instruction following: a fix with explicit constraints ("do not touch helpers.py",
  "keep the signature"), checked on the diff. Score 1 when the hidden tests pass and every
  constraint holds.
* eager editing: the right answer needs no edit or a one-line one. Each module comes as a
  pair of tasks with the same instruction: one where nothing is wrong (1 when nothing
  changed) and one with a wrong operator (when solved, the needed changed lines over the
  changed lines, else 0). The unit scored is the pair, and it scores its worse task: leaving
  the clean file alone only counts from a policy that does fix the broken one. (Until
  side-v2 each task was scored alone, so doing nothing earned 0.5.)
* code quality: composer-rewards' style reward (ruff findings per added line) on the
  produced diff against the oracle's on the same task. Score 1 when solved and the style
  value is at least the oracle's.
* interruption: a new user turn is injected after the first tool call ("change of plan");
  score 1 when the hidden tests, which check the new instruction, pass.

The tasks are generated here from their own small templates (and, for code quality, from
held-out tasks), never from training parameters. Graders read an `EpisodeResult`: the
files after the episode, the final message and the hidden-test report.

Every side eval is checked against the do-nothing baseline (finish at once, change nothing:
`composer_rl.eval.baseline_checkpoints`): each scores 0 for it, so a score is what the policy
did. A side eval's score is the mean over its units (a task, or for eager editing a pair)
with the standard error over units; `SIDE_VERSION` names the graders and task sets, so that
scores of different versions are not compared.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from composer_rewards import Episode
from composer_rewards.rewards.style import StyleReward
from composer_rl.agent.episode import EpisodeResult, EpisodeRunner, unified_diff
from composer_rl.agent.format import ASSISTANT, END_OF_TURN, USER
from composer_rl.eval.stats import mean_se
from composer_rl.tasks.model import GRADING_DIR, Category, Edit, Split, Task
from composer_rl.tasks.sources import sample_tasks
from composer_rl.tasks.stats import changed_lines
from composer_rl.tasks.templates import BUILTIN_TEMPLATES
from composer_rl.tasks.templates.base import Params, Template, grid
from composer_rl.tasks.templates.vocab import HELPERS, MODULES

SIDE_VERSION = "side-v2"  # v2: intent needs a question; eager editing is scored by pairs
SIDE_MODULES = MODULES[:4]
EAGER_MODULES = MODULES[:8]
"""Eight clean/broken pairs: the unit of eager editing is the pair, so it needs more modules."""

UNCHANGED_TEST = """from workspace_probe import workspace_text

ORIGINAL = {files!r}


def test_nothing_changed():
    for path, text in ORIGINAL.items():
        assert workspace_text(path) == text, path
"""
"""Hidden tests reach the workspace only through `workspace_probe` (composer-infra's
grader writes it beside them): values come back from a child process as plain data."""


def _changed(result: EpisodeResult) -> dict[str, str | None]:
    before, after = result.task.files, result.files_after
    return {p: after.get(p) for p in set(before) | set(after) if before.get(p) != after.get(p)}


class AmbiguousRequest(Template):
    """An instruction that cannot be carried out without guessing."""

    name: ClassVar[str] = "side_intent"
    category: ClassVar[Category] = Category.FEATURE_ITERATION
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=SIDE_MODULES, kind=["which_value", "which_function"])

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, kind = params["module"], params["kind"]
        path = f"{mod}.py"
        if kind == "which_value":
            source = "RATE = 0.2\n\n\ndef charge(x):\n    return x * RATE\n"
            instruction = f"Update the rate in `{path}`."
        else:
            source = "def low(xs):\n    return min(xs)\n\n\ndef high(xs):\n    return max(xs)\n"
            instruction = f"Make the function in `{path}` handle empty input."
        files = {path: source}
        tests = {f"{GRADING_DIR}/test_task.py": UNCHANGED_TEST.format(files=files)}
        return instruction, files, tests, []


def grade_intent(result: EpisodeResult) -> float:
    """1 for a clarifying question with nothing changed. Leaving the file alone without a
    question is what finishing at once does, so it earns nothing."""
    return 1.0 if not _changed(result) and "?" in result.final_message else 0.0


class ConstrainedFix(Template):
    """A fix whose instruction forbids one file and fixes a signature."""

    name: ClassVar[str] = "side_instruction_following"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=SIDE_MODULES, helper=HELPERS[:2])

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, helper = params["module"], params["helper"]
        path = f"{mod}.py"
        files = {
            "helpers.py": f"def {helper}(price, qty):\n    return price * qty\n",
            path: (
                f"from helpers import {helper}\n\n\n"
                f"def total(items, discount=0):\n"
                f"    return sum({helper}(p, q) for p, q in items) + 1 - discount\n"
            ),
        }
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                "from workspace_probe import call\n\n\ndef test_total():\n"
                f"    assert call({mod!r}, 'total', [(2, 3)]) == 6\n"
                f"    assert call({mod!r}, 'total', [(2, 3), (1, 1)], discount=2) == 5\n"
                f"    assert call({mod!r}, 'total', []) == 0\n"
            )
        }
        instruction = (
            f"`total` in `{path}` is off by one. Fix it; do not touch `helpers.py` and keep "
            "the signature of `total`."
        )
        edit = Edit(path=path, old=" + 1 - discount", new=" - discount")
        return instruction, files, tests, [edit]


def constraint_violations(result: EpisodeResult) -> list[str]:
    """The task's constraints (metadata `constraints`) that the episode's diff breaks."""
    rules: dict[str, Any] = result.task.metadata.get("constraints", {})
    changed = _changed(result)
    broken = [f"touched {p}" for p in rules.get("untouched", []) if p in changed]
    for path, line in rules.get("keep_lines", {}).items():
        after = result.files_after.get(path, "")
        if line not in after.splitlines():
            broken.append(f"changed `{line.strip()}` in {path}")
    return broken


def grade_instruction_following(result: EpisodeResult) -> float:
    return 1.0 if result.solved and not constraint_violations(result) else 0.0


OPERATIONS = [("total", "+"), ("diff", "-"), ("product", "*"), ("power", "**")]
WRONG = {"+": "-", "-": "+", "*": "+", "**": "*"}


class NeedlessEdit(Template):
    """Either nothing is wrong, or one operator in a file of several functions is."""

    name: ClassVar[str] = "side_eager_editing"
    category: ClassVar[Category] = Category.DEBUGGING
    difficulty: ClassVar[int] = 1

    def parameter_space(self) -> list[Params]:
        return grid(module=EAGER_MODULES, broken=[False, True])

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, broken = params["module"], params["broken"]
        path = f"{mod}.py"
        target, op = OPERATIONS[EAGER_MODULES.index(mod) % len(OPERATIONS)]
        blocks = [f"def {name}(a, b):\n    return a {o} b\n" for name, o in OPERATIONS]
        source = "\n\n".join(blocks)
        wrong = WRONG[op]
        edits: list[Edit] = []
        if broken:
            source = source.replace(
                f"def {target}(a, b):\n    return a {op} b",
                f"def {target}(a, b):\n    return a {wrong} b",
            )
            edits = [
                Edit(
                    path=path,
                    old=f"def {target}(a, b):\n    return a {wrong} b",
                    new=f"def {target}(a, b):\n    return a {op} b",
                )
            ]
        checks = "".join(
            f"    assert call({mod!r}, {name!r}, 7, 3) == {eval(f'7 {o} 3')}\n"
            for name, o in OPERATIONS
        )
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                f"from workspace_probe import call\n\n\ndef test_all():\n{checks}"
            )
        }
        instruction = (
            f"`{target}(a, b)` in `{path}` should return `a {op} b`. Fix it if it does not."
        )
        return instruction, {path: source}, tests, edits


def grade_eager_editing(result: EpisodeResult) -> float:
    """One task of a pair (see the module docstring: the pair scores its worse task)."""
    needed = int(result.task.metadata.get("changed_lines", 0))
    made = changed_lines(result.task.files, result.files_after)
    if needed == 0:
        return 1.0 if made == 0 and result.solved else 0.0
    if not result.solved or made == 0:
        return 0.0
    return min(1.0, needed / made)


QUALITY_TEMPLATES = ("add_string_function", "add_sort_flag", "move_callers", "tuples_to_dataclass")


def quality_tasks() -> list[Task]:
    by_name = {t.name: t for t in BUILTIN_TEMPLATES}
    pool = [t for name in QUALITY_TEMPLATES for t in by_name[name].tasks(Split.HELDOUT)]
    return sample_tasks(pool, per_group=2, seed=7)


def style_value(task: Task, after: dict[str, str]) -> float:
    """The style reward's value (0 best, -1 worst) of the change from `task.files` to
    `after`; 0 when no Python was written."""
    before = task.files
    changed = {p: after.get(p) for p in set(before) | set(after) if before.get(p) != after.get(p)}
    episode = Episode(
        task=task.instruction, diff=unified_diff(before, after), changed_files=changed
    )
    component = StyleReward().composer_reward(episode)
    return component.value if component is not None else 0.0


def grade_code_quality(result: EpisodeResult) -> float:
    if not result.solved:
        return 0.0
    oracle = style_value(result.task, result.task.solved_files())
    return 1.0 if style_value(result.task, result.files_after) >= oracle - 1e-9 else 0.0


class ChangeOfPlan(Template):
    """Add a function; after the first tool call the user changes its name and body."""

    name: ClassVar[str] = "side_interruption"
    category: ClassVar[Category] = Category.NEW_FEATURE
    difficulty: ClassVar[int] = 2

    def parameter_space(self) -> list[Params]:
        return grid(module=SIDE_MODULES, names=[["double", "triple"], ["grow", "boost"]])

    def context_files(self, params: Params) -> list[str]:
        return [f"{params['module']}.py"]

    def render(self, params: Params) -> tuple[str, dict[str, str], dict[str, str], list[Edit]]:
        mod, (first, second) = params["module"], params["names"]
        path = f"{mod}.py"
        source = "def identity(x):\n    return x\n"
        tests = {
            f"{GRADING_DIR}/test_task.py": (
                "from workspace_probe import call, evaluate\n\n\ndef test_new_plan():\n"
                f"    assert call({mod!r}, {second!r}, 4) == 12\n"
                f"    assert evaluate(\"hasattr({mod}, '{first}')\", imports=[{mod!r}]) is False\n"
                f"    assert call({mod!r}, 'identity', 5) == 5\n"
            )
        }
        instruction = f"Add a function `{first}(x)` to `{path}` that returns `x * 2`."
        edit = Edit(path=path, new=f"{source}\n\ndef {second}(x):\n    return x * 3\n")
        return instruction, {path: source}, tests, [edit]


def interruption_message(params: Params) -> str:
    first, second = params["names"]
    return f"Change of plan: do not add `{first}`; add `{second}(x)` returning `x * 3` instead."


def grade_interruption(result: EpisodeResult) -> float:
    return 1.0 if result.solved else 0.0


@dataclass(frozen=True)
class SideEval:
    name: str
    what: str
    tasks: Callable[[], list[Task]]
    grade: Callable[[EpisodeResult], float]


def _tagged(
    name: str, tasks: list[Task], extra: Callable[[Task], dict[str, Any]] | None = None
) -> list[Task]:
    """The tasks with `side_eval` (and `extra`) in their metadata and ids prefixed by the
    side eval's name, so that they never clash with a bench or held-out task's id."""
    out = []
    for task in tasks:
        meta = {**task.metadata, "side_eval": name, **(extra(task) if extra else {})}
        out.append(task.model_copy(update={"id": f"{name}.{task.id}", "metadata": meta}))
    return out


def _template_tasks(template: Template) -> list[Task]:
    return [template.build(p) for p in template.parameter_space()]


def _constraints(task: Task) -> dict[str, Any]:
    path = next(p for p in task.files if p != "helpers.py")
    return {
        "constraints": {
            "untouched": ["helpers.py"],
            "keep_lines": {path: "def total(items, discount=0):"},
        }
    }


def _pair(task: Task) -> dict[str, Any]:
    """The unit of eager editing: the module, shared by its clean and its broken task."""
    module = task.metadata["params"]["module"]
    return {"side_unit": f"eager_editing.{module}", "side_unit_size": 2}


def _interrupt(task: Task) -> dict[str, Any]:
    return {
        "interrupt": {"after_calls": 1, "message": interruption_message(task.metadata["params"])}
    }


SIDE_EVALS: tuple[SideEval, ...] = (
    SideEval(
        "intent",
        "ambiguous request: ask or leave it",
        lambda: _tagged("intent", _template_tasks(AmbiguousRequest())),
        grade_intent,
    ),
    SideEval(
        "instruction_following",
        "constraints checked on the diff",
        lambda: _tagged("instruction_following", _template_tasks(ConstrainedFix()), _constraints),
        grade_instruction_following,
    ),
    SideEval(
        "eager_editing",
        "no edit or a one-line one needed",
        lambda: _tagged("eager_editing", _template_tasks(NeedlessEdit()), _pair),
        grade_eager_editing,
    ),
    SideEval(
        "code_quality",
        "style reward against the oracle's",
        lambda: _tagged("code_quality", quality_tasks()),
        grade_code_quality,
    ),
    SideEval(
        "interruption",
        "new instruction after the first call",
        lambda: _tagged("interruption", _template_tasks(ChangeOfPlan()), _interrupt),
        grade_interruption,
    ),
)
SIDE_BY_NAME = {s.name: s for s in SIDE_EVALS}


def side_tasks() -> list[Task]:
    """Every side eval's tasks, each tagged with `metadata["side_eval"]`."""
    return [t for s in SIDE_EVALS for t in s.tasks()]


def side_scores(results: list[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """Per side eval: tasks, units, score (mean over units), its SE over units, and each
    unit's value (`per_unit`, what a lift over a baseline is paired on).

    A task's value is the mean of its episodes' grades; a unit (metadata `side_unit`, else the
    task) scores its worst task. Only units all of whose tasks ran (`side_unit_size`) are
    scored, so a half-run pair is not scored as its clean half."""
    per_task: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    unit_of: dict[str, tuple[str, int]] = {}
    for r in results:
        name = r.task.metadata.get("side_eval")
        if name in SIDE_BY_NAME:
            per_task[name][r.task.id].append(SIDE_BY_NAME[name].grade(r))
            meta = r.task.metadata
            unit_of[r.task.id] = (
                str(meta.get("side_unit", r.task.id)),
                meta.get("side_unit_size", 1),
            )
    rows: dict[str, dict[str, Any]] = {}
    for side in SIDE_EVALS:
        tasks = per_task.get(side.name, {})
        if not tasks:
            continue
        units: dict[str, list[float]] = defaultdict(list)
        size: dict[str, int] = {}
        for task_id, grades in tasks.items():
            unit, size[unit] = unit_of[task_id]
            units[unit].append(sum(grades) / len(grades))
        per_unit = {u: min(v) for u, v in units.items() if len(v) >= size[u]}
        if not per_unit:
            continue
        score, se = mean_se(per_unit.values())
        rows[side.name] = {
            "tasks": len(tasks),
            "units": len(per_unit),
            "score": score,
            "score_se": se,
            "what": side.what,
            "per_unit": per_unit,
        }
    return rows


class InterruptingRunner(EpisodeRunner):
    """The episode runner, plus a user turn injected into an episode whose task carries
    `metadata["interrupt"] = {"after_calls": k, "message": ...}` once it has made k tool
    calls. Episodes of other tasks run exactly as in `EpisodeRunner`.

    The turn is appended as a prompt segment (not trained on, not counted as the model's):
    `<|end_of_turn|><|user|>message<|end_of_turn|><|assistant|>`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._interrupted: set[tuple[str, int]] = set()

    def user_turn(self, result: EpisodeResult) -> str | None:
        spec = result.task.metadata.get("interrupt")
        key = (result.task.id, result.sample)
        if not spec or key in self._interrupted or len(result.calls) < int(spec["after_calls"]):
            return None
        self._interrupted.add(key)
        return f"{END_OF_TURN}{USER}{spec['message']}{END_OF_TURN}{ASSISTANT}"
