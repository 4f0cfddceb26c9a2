"""Long work reports progress in a log file too: plain lines when stdout is not a terminal
(or with --no-progress), where a rich bar wrote nothing until it ended."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _stage_helpers import tiny_config, write_corpus

from composer_rl import progress as progress_module
from composer_rl.progress import StepProgress


def test_a_pretrain_phase_writes_lines_to_a_file(tmp_path: Path) -> None:
    """The real command with stdout redirected to a file, as `... > log` or nohup does."""
    run_dir = tmp_path / "stage1"
    config = tmp_path / "stage1.json"
    config.write_text(json.dumps(tiny_config(run_dir, write_corpus(tmp_path / "corpus.jsonl"))))
    log = tmp_path / "log"
    command = [sys.executable, "-m", "composer_rl.cli", "pretrain", "--config", str(config)]
    command += ["--run-dir", str(run_dir)]
    with log.open("w") as out:
        subprocess.run(
            [*command, "--skip-long-context"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
            timeout=600,
        )
    lines = log.read_text().splitlines()
    assert any(line.startswith("pretrain: tokenizer and token cache of ") for line in lines)
    assert "pretrain: start, to 8 steps" in lines
    steps = [line for line in lines if line.startswith("pretrain: 4/8 steps (50%), loss ")]
    assert steps and "tok/s" in steps[0] and "steps/s" in steps[0] and "ETA" in steps[0]
    assert any(line.startswith("pretrain: done, 8/8 steps (100%)") for line in lines)
    # Run again: the finished phase is reused, and says so.
    again = subprocess.run(
        [*command, "--skip-long-context", "--no-progress"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    assert f"pretrain: finished already, reused ({run_dir / 'pretrain'})" in again.stdout


def test_lines_come_every_tenth_and_every_30_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    with StepProgress("sft", 1000, stream=out) as progress:
        for step in range(1, 1001):
            now[0] += 0.5 if step <= 120 else 0.01  # 60 s over the first 120 steps
            progress.update(step, info="loss 1.000")
    lines = out.getvalue().splitlines()
    assert lines[0] == "sft: start, to 1000 steps"
    # 30 s of wall time come at step 60, before the tenth (100 steps); then every 100 steps.
    assert lines[1].startswith("sft: 60/1000 steps (6%), loss 1.000, 2.00 steps/s, elapsed 0m30s")
    assert "ETA 7m50s" in lines[1]
    assert lines[2].startswith("sft: 120/1000 steps")
    assert [line.split()[1] for line in lines[3:-1]] == [f"{s}/1000" for s in range(220, 1000, 100)]
    assert lines[-1].startswith("sft: done, 1000/1000 steps (100%)")


def test_nothing_when_off_and_resume_says_where_it_starts() -> None:
    out = io.StringIO()
    with StepProgress("x", 10, show=False, stream=out) as progress:
        progress.update(5)
    assert out.getvalue() == ""
    with StepProgress("x", 10, completed=4, show="lines", stream=out) as progress:
        progress.update(10)
    assert out.getvalue().splitlines()[0] == "x: start, from 4 to 10 steps"


def test_playing_demonstrations_reports_progress(capsys: pytest.CaptureFixture[str]) -> None:
    """SFT's demonstrations (minutes of sandbox runs before its first step) report too."""
    from itertools import islice

    from composer_model.tokenizer import train_tokenizer
    from composer_rl.stages.sft import demonstrations
    from composer_rl.tasks import BUILTIN_TEMPLATES, Split

    tasks = list(islice(BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), 3))
    tokenizer = train_tokenizer(["def f(x):\n    return x\n"] * 4, vocab_size=300)
    demonstrations(tasks, tokenizer, show_progress="lines", label="held-out demonstrations")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "held-out demonstrations: start, to 3 demonstrations"
    assert lines[1].startswith("held-out demonstrations: 1/3 demonstrations (33%)")
    assert lines[-1].startswith("held-out demonstrations: done, 3/3 demonstrations (100%)")
