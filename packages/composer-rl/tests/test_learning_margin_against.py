"""`benchmarks/learning_margin.py --against`: another policy set beside `--model` on the same
tasks, paired over tasks (how two stage ones, or a reference and the RL start, are compared)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from composer_rl.eval.scores import PolicyScores

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "learning_margin.py"


def _policy(name: str, solved: set[str], tested: set[str]) -> PolicyScores:
    tasks = [f"keep_items-{i:02d}" for i in range(6)] + [f"pick_item-{i:02d}" for i in range(4)]
    return PolicyScores(
        name=name,
        checkpoint=f"runs/{name}/final",
        per_task_pass1={t: float(t in solved) for t in tasks},
        behaviours={"tests_run": {t: float(t in tested) for t in tasks}},
    )


def test_the_other_policy_is_paired_over_tasks_with_the_baselines_beside_it(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    script = benchmark_script("learning_margin")
    base = _policy("syllables", {"keep_items-00"}, {"keep_items-00", "pick_item-00"})
    other = _policy("words", {"keep_items-00", "keep_items-01", "pick_item-02"}, set())
    nothing = _policy("do_nothing", set(), set())
    text = script.against_markdown(base, other, {"do_nothing": nothing})
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if "|" in line}
    # pass@1 0.1 -> 0.3 over 10 tasks: margins 1, 1 and eight 0, s.e. sd/sqrt(10)
    assert (
        "| pass@1 | 10 | 0.100 ± 0.100 | 0.300 ± 0.153 | +0.200 ± 0.133 | 0.000 ± 0.000 |"
        in (rows["pass@1"])
    )
    assert "-0.200" in rows["tests_run"]
    assert "| keep_items | 6 | 0.167 ± 0.167 | +0.167 ± 0.167 |" in text
    assert "| pick_item | 4 | 0.000 ± 0.000 | +0.250 ± 0.250 |" in text


def test_a_checkpoint_that_is_none_is_refused_before_anything_runs(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPT), "--seeds", "--against", str(tmp_path / "nope")]
    command += ["--work-dir", str(tmp_path / "work")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'nope'} is no checkpoint (no tokenizer.json): give a stage-one "
        "or RL final/ directory"
    ]
    assert not (tmp_path / "work").exists()


def test_a_behaviour_no_task_pairs_on_prints_a_dash_not_a_zero_margin(
    benchmark_script: Callable[[str], ModuleType],
) -> None:
    """Tokens per solved difficulty-1 task where the policies solved different tasks: the
    table says there is no margin, where it once printed '+0.000 ± nan'."""
    script = benchmark_script("learning_margin")
    sft = _policy("sft", {"keep_items-00"}, set())
    sft.tokens_per_solved_d1 = {"keep_items-00": 134.0}
    rl = _policy("rl", {"keep_items-01"}, set())
    rl.tokens_per_solved_d1 = {"keep_items-01": 122.0}
    (row,) = [
        line
        for line in script.behaviour_markdown(sft, {0: rl}).splitlines()
        if line.startswith("| tokens per solved")
    ]
    assert row.endswith("| seed 0: 122.000 (-) | - |") and "nan" not in row
