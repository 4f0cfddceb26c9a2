"""Baselines beside every evaluation: the do-nothing and random policies run through the same
episode runner and grading, are reported beside each score with the lift over them, and the
side evals give do-nothing nothing; reward components some episodes lack say so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from composer_rewards import EpisodeScore, RewardComponent
from composer_rewards.scoring import ScoredComponent
from composer_rl.agent.episode import EpisodeResult, RunnerConfig
from composer_rl.agent.quick import random_checkpoint
from composer_rl.agent.transcript import Transcript
from composer_rl.eval import bench
from composer_rl.eval.baseline_checkpoints import (
    SCRIPTED_POLICY_FILE,
    do_nothing_checkpoint,
    is_scripted,
    random_checkpoint_like,
)
from composer_rl.eval.baselines import baseline_scores, pass1_lift
from composer_rl.eval.evaluate import EvalConfig, run_eval, summarize
from composer_rl.eval.lift import lift_over_baselines
from composer_rl.eval.side import SIDE_BY_NAME, SIDE_EVALS
from composer_rl.eval.table import print_comparison, print_summary

QUICK = RunnerConfig(max_turns=1, max_new_tokens=4, grading_workers=2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny checkpoint standing in for the policy being evaluated."""
    return random_checkpoint(tmp_path_factory.mktemp("policy") / "final")


@pytest.fixture(scope="module")
def do_nothing(reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return do_nothing_checkpoint(tmp_path_factory.mktemp("baseline") / "do_nothing", reference)


def _render(summary: dict, compare: dict | None = None) -> str:  # type: ignore[type-arg]
    console = Console(record=True, width=200)
    if compare is None:
        print_summary(summary, console)
    else:
        print_comparison(summary, compare, ("A", "B"), console)
    return console.export_text()


def test_do_nothing_runs_through_the_episode_runner(do_nothing: Path) -> None:
    """No weights: the scripted engine finishes at once; the runner grades the untouched
    repository with the hidden tests, as for a model."""
    assert is_scripted(do_nothing) and (do_nothing / SCRIPTED_POLICY_FILE).is_file()
    assert not (do_nothing / "config.json").exists()
    tasks = bench.bench_tasks()[:2]
    summary, results = run_eval(do_nothing, tasks, EvalConfig(runner=QUICK))
    for r in results:
        assert r.stop_reason == "finish" and r.finished and r.final_message == ""
        assert r.report is not None and r.report.source == "grader"  # really graded
        assert r.files_after == r.task.files  # nothing changed
    assert summary["overall"]["pass@1"] == 0.0  # bench tasks need a change


def test_redesigned_side_evals_give_do_nothing_zero(do_nothing: Path) -> None:
    """Computed for real: every side eval scores 0 for finishing at once. Under the old
    graders intent gave it 0.5 (no edit, no question) and eager editing 0.5 (half the tasks
    need no edit); the pair unit and the required question are what remove that."""
    eager = SIDE_BY_NAME["eager_editing"].tasks()
    module = eager[0].metadata["side_unit"]
    pair = [t for t in eager if t.metadata["side_unit"] == module]
    assert len(pair) == 2 and {bool(t.solution) for t in pair} == {True, False}
    tasks = [*SIDE_BY_NAME["intent"].tasks()[:2], *pair]
    tasks += [s.tasks()[0] for s in SIDE_EVALS if s.name not in ("intent", "eager_editing")]
    summary, results = run_eval(do_nothing, tasks, EvalConfig(runner=QUICK))
    clean = next(r for r in results if r.task.id == next(t.id for t in pair if not t.solution))
    assert clean.solved  # the clean half really is passed by doing nothing ...
    assert SIDE_BY_NAME["eager_editing"].grade(clean) == 1.0
    scores = {name: row["score"] for name, row in summary["side_evals"].items()}
    assert set(scores) == {s.name for s in SIDE_EVALS}
    assert scores == dict.fromkeys(scores, 0.0)  # ... and the pair still scores 0
    assert summary["side_evals"]["eager_editing"]["units"] == 1


def test_random_baseline_has_the_reference_architecture(reference: Path, tmp_path: Path) -> None:
    out = random_checkpoint_like(tmp_path / "random", reference, seed=3)
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (reference / "config.json").read_text()
    )
    assert (out / "tokenizer.json").read_bytes() == (reference / "tokenizer.json").read_bytes()
    weights = (out / "model.safetensors").read_bytes()
    assert weights != (reference / "model.safetensors").read_bytes()  # fresh weights


def test_eval_reports_both_baselines_and_the_lift(reference: Path) -> None:
    tasks = bench.bench_tasks()[:2] + SIDE_BY_NAME["intent"].tasks()[:2]
    config = EvalConfig(runner=QUICK, baselines=("do_nothing", "random"))
    summary, _ = run_eval(reference, tasks, config)
    assert set(summary["baselines"]) == {"do_nothing", "random"}
    for row in summary["baselines"].values():
        assert row["overall"]["tasks"] == 2 and "pass@1_se" in row["overall"]
        assert set(row["per_task"]["pass@1"]) == {t.id for t in tasks[:2]}
        assert row["side_evals"]["intent"]["score"] == 0.0
    assert summary["command"] and summary["side_version"] == "side-v2"
    text = _render(summary)
    for needle in ("do-nothing", "random", "lift", "against the baselines", "command:"):
        assert needle in text, needle
    assert "(over do-nothing)" in text or "(over random)" in text


def test_a_report_without_baselines_says_so() -> None:
    row = {"tasks": 2, "pass@1": 0.5, "pass@1_se": 0.5}
    summary = {
        "suite": "bench-v4",
        "overall": row,
        "by_category": {},
        "by_difficulty": {},
        "reward_total_mean": 0.0,
    }
    assert "baselines: not scored" in _render(summary)


def test_lift_is_paired_over_the_better_baseline() -> None:
    policy = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0}
    baselines = {
        "do_nothing": {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0},
        "random": dict.fromkeys(policy, 0.0),
    }
    lift = lift_over_baselines(policy, baselines)
    assert lift is not None and lift.baseline == "do_nothing" and lift.tasks == 4
    assert lift.mean == pytest.approx(0.5)
    assert lift.se == pytest.approx(math.sqrt(1 / 3) / 2)  # sd of 0, 1, 0, 1 over sqrt(4)
    assert lift_over_baselines(policy, {"x": {"z": 1.0}}) is None


def test_baseline_scores_go_through_score_policy(reference: Path) -> None:
    """What benchmarks/learning_margin.py calls: PolicyScores of each baseline."""
    tasks = bench.bench_tasks()[:2]
    scores = baseline_scores(tasks, QUICK, like=reference, batch=4)
    assert set(scores) == {"do_nothing", "random"}
    for name, s in scores.items():
        assert s.name == name and set(s.per_task_pass1) == {t.id for t in tasks}
        mean, se = s.pass1()
        assert mean == 0.0 and se == 0.0
    lift = pass1_lift(scores["random"], {"do_nothing": scores["do_nothing"]})
    assert lift is not None and lift.mean == 0.0
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_scores(tasks, QUICK, which=("oracle",))  # type: ignore[arg-type]


def _scored(task_id: str, names: list[str]) -> EpisodeScore:
    return EpisodeScore(
        components=tuple(
            ScoredComponent(plugin=n, component=RewardComponent(name=n, value=-1.0)) for n in names
        )
    )


def test_a_component_added_mid_run_says_how_many_episodes(reference: Path) -> None:
    """A plugin added at step 1 scores only later episodes: the report says on how many of
    them its mean rests, beside the mean."""
    from composer_model import ComposerTokenizer

    task = bench.bench_tasks()[0]
    results = [
        EpisodeResult(task=task, sample=i, transcript=Transcript.start(task.instruction))
        for i in range(3)
    ]
    scores = [_scored(task.id, ["correctness"])] + [
        _scored(task.id, ["correctness", "tests_touched"]) for _ in range(2)
    ]
    tokenizer = ComposerTokenizer.from_file(reference / "tokenizer.json")
    summary = summarize(results, tokenizer, EvalConfig(samples=3), 1.0, scores)
    assert summary["reward_components_episodes"] == {"correctness": 3, "tests_touched": 2}
    text = _render(summary)
    assert "tests_touched" in text and "(2 of 3 episodes)" in text
    assert "correctness" in text and "(3 of 3" not in text
    other = {**summary, "reward_components_episodes": {"correctness": 3, "tests_touched": 3}}
    assert "(A: 2 of 3 episodes)" in _render(summary, other)


def test_scoring_reports_its_episodes_as_plain_lines_on_stderr(
    do_nothing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long scoring pass in a log file shows where it is; stdout stays the report's."""
    tasks = bench.bench_tasks()[:2]
    run_eval(do_nothing, tasks, EvalConfig(runner=QUICK))
    captured = capsys.readouterr()
    assert "scoring" not in captured.out
    lines = [line for line in captured.err.splitlines() if line.startswith("scoring (")]
    assert lines and lines[-1].startswith("scoring (greedy): done, 2/2 episodes"), captured.err
    run_eval(do_nothing, tasks, EvalConfig(runner=QUICK, show_progress=False))
    assert "scoring" not in capsys.readouterr().err
