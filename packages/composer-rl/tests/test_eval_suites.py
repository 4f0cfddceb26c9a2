"""Evaluation suites: standard errors, the frozen bench, the five side evals' graders, the
interruption runner, and the CLI (--suite bench, --compare)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import torch

from composer_infra.sandbox import TestReport
from composer_model import ComposerModel, InferenceEngine, preset, save_pretrained, train_tokenizer
from composer_rewards import ToolCall
from composer_rl.agent.episode import EpisodeResult, RunnerConfig
from composer_rl.agent.format import ASSISTANT, END_OF_TURN, USER
from composer_rl.agent.oracle import play_oracle
from composer_rl.agent.transcript import Transcript
from composer_rl.cli import main
from composer_rl.eval import bench
from composer_rl.eval.evaluate import EvalConfig, run_eval, write_report
from composer_rl.eval.side import (
    SIDE_BY_NAME,
    SIDE_EVALS,
    InterruptingRunner,
    side_scores,
    side_tasks,
)
from composer_rl.eval.stats import format_se, mean_se
from composer_rl.tasks import Split, Task, collect_tasks
from composer_rl.tasks.stats import medians
from composer_rl.tasks.templates.base import params_key


def test_standard_error_over_tasks() -> None:
    mean, se = mean_se([1, 0, 0, 1, 1, 0, 0, 0])
    p, n = 3 / 8, 8
    assert mean == p and se == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
    assert math.isnan(mean_se([1.0])[1])
    assert format_se(0.25, 0.0612) == "0.250 ± 0.061"
    assert format_se(0.25, math.nan) == "0.250"
    assert format_se(0.0216, 0.0241, sign=True) == "+0.022 ± 0.024"
    assert format_se(-10.5, 4.0, digits=1, sign=True) == "-10.5 ± 4.0"


def test_bench_is_frozen_disjoint_larger_and_short() -> None:
    tasks = bench.bench_tasks()
    assert len(tasks) == len(bench.BENCH_TEMPLATES) * bench.BENCH_PER_TEMPLATE
    assert {t.metadata["suite"] for t in tasks} == {bench.BENCH_VERSION}
    train = collect_tasks(Split.TRAIN)
    key = lambda t: params_key(t.metadata["template"], t.metadata["params"])  # noqa: E731
    assert not {key(t) for t in tasks} & {key(t) for t in train}
    content = lambda t: (t.instruction, tuple(sorted(t.files.items())))  # noqa: E731
    assert not {content(t) for t in tasks} & {content(t) for t in train}
    assert medians(tasks).changed_lines > medians(train).changed_lines
    assert medians(tasks).description_chars <= medians(train).description_chars


def test_bench_refuses_to_change_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "BENCH_DIGEST", "0" * 64)
    with pytest.raises(bench.BenchChangedError, match="Bump BENCH_VERSION"):
        bench.bench_tasks()


def _result(
    task: Task, files: dict[str, str], message: str = "", passed: bool = True
) -> EpisodeResult:
    report = TestReport(passed=1 if passed else 0, failed=0 if passed else 1, source="grader")
    return EpisodeResult(
        task=task,
        sample=0,
        transcript=Transcript.start(task.instruction),
        finished=True,
        final_message=message,
        report=report,
        files_after=files,
    )


def _side(name: str) -> list[Task]:
    return SIDE_BY_NAME[name].tasks()


def test_intent_grader() -> None:
    task = _side("intent")[0]
    grade = SIDE_BY_NAME["intent"].grade
    assert grade(_result(task, task.files, "Which rate do you want?")) == 1.0
    # Leaving it alone without asking is what finishing at once does: it earns nothing.
    assert grade(_result(task, task.files, "Left it alone.")) == 0.0
    assert grade(_result(task, task.files, "")) == 0.0
    edited = {k: v + "# changed\n" for k, v in task.files.items()}
    assert grade(_result(task, edited, "What rate? I set 0.3 for now.")) == 0.0


def test_instruction_following_grader_checks_the_diff() -> None:
    task = _side("instruction_following")[0]
    grade = SIDE_BY_NAME["instruction_following"].grade
    assert grade(_result(task, task.solved_files())) == 1.0
    helper_fix = {**task.files, "helpers.py": task.files["helpers.py"] + "\n# touched\n"}
    assert grade(_result(task, helper_fix)) == 0.0
    path = next(p for p in task.files if p != "helpers.py")
    resigned = {**task.solved_files()}
    resigned[path] = resigned[path].replace(
        "def total(items, discount=0):", "def total(items, discount=0, extra=0):"
    )
    assert grade(_result(task, resigned)) == 0.0
    assert grade(_result(task, task.solved_files(), passed=False)) == 0.0


def test_eager_editing_grader_penalises_extra_lines() -> None:
    tasks = _side("eager_editing")
    grade = SIDE_BY_NAME["eager_editing"].grade
    clean = next(t for t in tasks if not t.solution)
    assert grade(_result(clean, clean.files)) == 1.0
    touched = {k: v + "\n# reviewed\n" for k, v in clean.files.items()}
    assert grade(_result(clean, touched)) == 0.0
    broken = next(t for t in tasks if t.solution)
    assert grade(_result(broken, broken.solved_files())) == 1.0
    path = broken.solution[0].path
    noisy = broken.solved_files()
    noisy[path] = noisy[path] + "\n\ndef extra(a, b):\n    return a\n"
    assert 0 < grade(_result(broken, noisy)) < 1.0


def test_eager_editing_scores_a_pair_by_its_worse_task() -> None:
    """The unit is the module's clean/broken pair: leaving both alone (do-nothing) scores 0,
    editing both scores 0, only fixing the broken one and leaving the clean one scores 1."""
    tasks = _side("eager_editing")
    assert len({t.metadata["side_unit"] for t in tasks}) == len(tasks) // 2 == 8
    unit = tasks[0].metadata["side_unit"]
    clean, broken = sorted(
        (t for t in tasks if t.metadata["side_unit"] == unit), key=lambda t: bool(t.solution)
    )
    touched = {k: v + "\n# reviewed\n" for k, v in clean.files.items()}

    def score(*results: EpisodeResult) -> float:
        return side_scores(list(results))["eager_editing"]["score"]

    unfixed = _result(broken, broken.files, passed=False)
    assert score(_result(clean, clean.files), unfixed) == 0.0  # do nothing
    assert (
        score(_result(clean, touched, passed=True), _result(broken, broken.solved_files())) == 0.0
    )
    assert score(_result(clean, clean.files), _result(broken, broken.solved_files())) == 1.0
    # Half a pair is not scored as a unit (its clean half alone would score 1).
    assert "eager_editing" not in side_scores([_result(clean, clean.files)])


def test_code_quality_grader_compares_with_the_oracle() -> None:
    task = next(t for t in _side("code_quality") if t.metadata["template"] == "add_string_function")
    grade = SIDE_BY_NAME["code_quality"].grade
    assert grade(_result(task, task.solved_files())) == 1.0
    path = task.solution[0].path
    ugly = task.solved_files()
    ugly[path] = "import os, sys\n" + ugly[path].replace("    return", "    x=1;  return")
    assert grade(_result(task, ugly)) == 0.0
    assert grade(_result(task, task.solved_files(), passed=False)) == 0.0


def test_side_tasks_are_tagged_and_distinct() -> None:
    tasks = side_tasks()
    assert {t.metadata["side_eval"] for t in tasks} == {s.name for s in SIDE_EVALS}
    assert len({t.id for t in tasks}) == len(tasks)
    assert not {t.id for t in tasks} & {t.id for t in bench.bench_tasks()}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, ComposerModel]:
    tasks = _side("interruption")[:2]
    texts = [play_oracle(t, grade=False).transcript.text for t in tasks]
    tokenizer = train_tokenizer(texts * 4, vocab_size=400)
    torch.manual_seed(0)
    model = ComposerModel(preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=2))
    checkpoint = tmp_path_factory.mktemp("ckpt") / "final"
    save_pretrained(model, checkpoint)
    tokenizer.save(checkpoint / "tokenizer.json")
    return checkpoint, tokenizer, model


def test_interruption_is_injected_after_the_first_call(tiny) -> None:  # type: ignore[no-untyped-def]
    """The runner puts `user_turn`'s text into the context before the next turn (as context,
    never trained on); the interrupting runner's turn comes once, after the first call."""
    _, tokenizer, model = tiny
    task = _side("interruption")[0]
    engine = InferenceEngine(model, tokenizer, max_batch_size=2, max_seq_len=512)
    runner = InterruptingRunner(engine, tokenizer, RunnerConfig())
    result = EpisodeResult(task=task, sample=0, transcript=Transcript.start(task.instruction))
    message = task.metadata["interrupt"]["message"]
    assert runner.user_turn(result) is None  # before any tool call
    call = ToolCall(name="read_file", arguments={"path": task.solution[0].path})
    result.calls.append(call.model_copy(update={"turn": 1}))
    assert runner.user_turn(result) == f"{END_OF_TURN}{USER}{message}{END_OF_TURN}{ASSISTANT}"
    assert runner.user_turn(result) is None  # injected once


def test_run_eval_scores_bench_and_side_evals_with_errors(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    checkpoint, _, _ = tiny
    # One unit of each side eval: a task, or for eager editing a clean/broken pair.
    eager = _side("eager_editing")
    pair = [t for t in eager if t.metadata["side_unit"] == eager[0].metadata["side_unit"]]
    side = [s.tasks()[0] for s in SIDE_EVALS if s.name != "eager_editing"] + pair
    tasks = bench.bench_tasks()[:2] + side
    config = EvalConfig(samples=1, runner=RunnerConfig(max_turns=1, max_new_tokens=4))
    summary, results = run_eval(checkpoint, tasks, config)
    assert summary["overall"]["tasks"] == 2 and "pass@1_se" in summary["overall"]
    assert set(summary["side_evals"]) == {s.name for s in SIDE_EVALS}
    assert all(row["units"] == 1 for row in summary["side_evals"].values())
    assert summary["side_evals"]["eager_editing"]["tasks"] == 2
    assert "reward_total_se" in summary
    write_report(summary, results, tmp_path / "a.json")
    data = json.loads((tmp_path / "a.json").read_text())  # strict JSON: NaN written as null
    assert data["summary"]["side_evals"]["intent"]["score_se"] is None  # one task: no SE
    assert data["summary"]["overall"]["pass@1_se"] == 0.0  # two unsolved tasks


def _report(path: Path, solved: list[int], side: float) -> Path:
    mean, se = mean_se(solved)
    row = {"tasks": len(solved), "pass@1": mean, "pass@1_se": se}
    summary = {
        "suite": "bench-v1",
        "overall": row,
        "by_category": {"migration": row},
        "by_difficulty": {"difficulty 3": row},
        "side_evals": {"intent": {"tasks": 8, "score": side, "score_se": 0.1, "what": "x"}},
        "reward_total_mean": statistics.fmean(solved),
        "reward_total_se": se,
        "reward_components_mean": {},
    }
    path.write_text(json.dumps({"summary": summary, "episodes": []}))
    return path


def test_compare_prints_two_reports_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _report(tmp_path / "sft.json", [1, 0, 0, 0], 0.25)
    b = _report(tmp_path / "rl.json", [1, 1, 0, 1], 0.5)
    assert main(["eval", "--suite", "bench", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "pass@1 all" in out and "0.250 ± 0.250" in out and "0.750 ± 0.250" in out
    assert "+0.500" in out and "side: intent" in out and "+0.250" in out
    other = json.loads(b.read_text())
    other["summary"]["suite"] = "heldout"
    b.write_text(json.dumps(other))
    capsys.readouterr()
    assert main(["eval", "--compare", str(a), str(b)]) == 2
    assert "same suite" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_bench_suite_end_to_end(
    tiny, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    checkpoint, _, _ = tiny
    out = tmp_path / "bench.json"
    argv = ["eval", "--suite", "bench", "--checkpoint", str(checkpoint), "--out", str(out)]
    assert main([*argv, "--max-turns", "1", "--max-new-tokens", "4"]) == 0
    text = capsys.readouterr().out
    assert "side evaluations" in text and "±" in text
    summary = json.loads(out.read_text())["summary"]
    assert summary["suite"] == bench.BENCH_VERSION
    assert summary["overall"]["tasks"] == len(bench.bench_tasks())
    assert len(summary["side_evals"]) == 5
