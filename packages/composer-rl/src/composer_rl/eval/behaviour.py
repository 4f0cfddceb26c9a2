"""What a policy does on its way to a verdict: the behaviours RL is meant to select.

Pass@1 says whether a policy solves more tasks; these rates say how. Stage one demonstrates
a mix of behaviours (careful, recovering, careless, and the habits the reward plugins exist
for: `composer_rl.agent.behaviours`), and RL, paid only by the hidden tests and the reward
plugins, selects among them. So each held-out episode is read for:

- `tests_run`: it ran a test suite at all (the `run` tool);
- `tested_after_last_edit`: a test run came after its last edit (it checked the code it left);
- `recovered`: of the episodes with a failing test run, the share that ended solved;
- `todo_left`: its diff adds a TODO, FIXME or XXX line;
- `says_checked`: its final message says how the work was checked and a test run after the
  last edit backs it (the communication reward's reading, `composer_rewards.transcript`);
- `reread`: it read one file twice with no edit of that file between;
- `failed_read_again`: it read a missing file again, with nothing between that could have
  made it (composer-rewards' `failed_reads_again`, the reading of the `failed_read_again`
  monitor): the loop in which the SFT policies of 2026-12-05 spent most of their turns
  (docs/rl/2026-12-05-failed-read-loops.md);
- `tokens_per_solved_d1`: generated tokens of the solved difficulty-1 episodes.

Every rate is a mean over tasks of the task's mean over its episodes, so it carries a
standard error over tasks as the pass rates do (`composer_rl.eval.stats`), and two policies
scored on the same tasks compare by the paired difference.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable

from composer_rewards import Episode
from composer_rewards.rewards.failed_reads import failed_reads_again
from composer_rewards.transcript import read_transcript
from composer_rl.eval.stats import mean_se

BEHAVIOURS = (
    "tests_run",
    "tested_after_last_edit",
    "recovered",
    "todo_left",
    "says_checked",
    "reread",
    "failed_read_again",
)
"""The per-episode behaviour flags, in the order tables print them."""

_TODO = re.compile(r"^\+(?!\+\+).*\b(TODO|FIXME|XXX)\b", re.MULTILINE)
_CHECK_WORDS = re.compile(
    r"\b(tests?|pytest|ran|checked|verified|confirmed|pass(es|ed|ing)?|fail(s|ed|ing)?)\b",
    re.IGNORECASE,
)


def _reread(episode: Episode) -> bool:
    """A file read a second time with no successful edit of it in between."""
    read_since_edit: set[str] = set()
    for call in episode.tool_calls:
        path = str(call.arguments.get("path", ""))
        if call.name == "read_file" and call.ok:
            if path in read_since_edit:
                return True
            read_since_edit.add(path)
        elif call.name in ("write_file", "edit_file") and call.ok:
            read_since_edit.discard(path)
    return False


def episode_behaviours(episode: Episode, solved: bool) -> dict[str, float | None]:
    """The flags of one episode (1.0 / 0.0; None where the flag does not apply: `recovered`
    for an episode without a failing test run)."""
    transcript = read_transcript(episode)
    test_runs = [run for run in transcript.runs if run.is_test]
    checked = transcript.check_run(tests=True)
    failed_once = any(run.failed for run in test_runs)
    return {
        "tests_run": float(bool(test_runs)),
        "tested_after_last_edit": float(checked is not None),
        "recovered": float(solved) if failed_once else None,
        "todo_left": float(bool(_TODO.search(episode.diff))),
        "says_checked": float(
            checked is not None and bool(_CHECK_WORDS.search(episode.final_message))
        ),
        "reread": float(_reread(episode)),
        "failed_read_again": float(bool(failed_reads_again(episode))),
    }


def per_task_behaviours(
    episodes: Iterable[tuple[str, Episode, bool]],
) -> dict[str, dict[str, float]]:
    """{behaviour: {task id: the task's mean}} over (task id, episode, solved) triples; a
    task enters a behaviour only where the flag applies to one of its episodes."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for task_id, episode, solved in episodes:
        for name, value in episode_behaviours(episode, solved).items():
            if value is not None:
                values[name][task_id].append(value)
    return {
        name: {task: statistics.fmean(v) for task, v in values[name].items()}
        for name in BEHAVIOURS
        if name in values
    }


def tokens_per_solved(
    episodes: Iterable[tuple[str, int, int, bool]], difficulty: int = 1
) -> dict[str, float]:
    """{task id: mean generated tokens of its solved episodes} for tasks of `difficulty`,
    from (task id, difficulty, generated tokens, solved)."""
    values: dict[str, list[float]] = defaultdict(list)
    for task_id, task_difficulty, tokens, solved in episodes:
        if solved and task_difficulty == difficulty:
            values[task_id].append(float(tokens))
    return {task: statistics.fmean(v) for task, v in values.items()}


def behaviour_rates(per_task: dict[str, dict[str, float]]) -> dict[str, tuple[float, float, int]]:
    """{behaviour: (mean over tasks, its standard error, tasks)}."""
    return {
        name: (*mean_se(tasks.values()), len(tasks)) for name, tasks in per_task.items() if tasks
    }


__all__ = [
    "BEHAVIOURS",
    "behaviour_rates",
    "episode_behaviours",
    "per_task_behaviours",
    "tokens_per_solved",
]
