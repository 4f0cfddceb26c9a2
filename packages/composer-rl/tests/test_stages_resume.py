"""A pretraining run killed with SIGKILL resumes from its checkpoint and ends where an
uninterrupted run ends: same metrics record, same weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _stage_helpers import (
    assert_same_phase,
    kill_at_first_checkpoint,
    tiny_config,
    write_corpus,
)


def _command(config: Path, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-c", "import sys; from composer_rl.cli import main; sys.exit(main())",
        "pretrain", "--config", str(config),
        "--run-dir", str(run_dir), "--skip-long-context", "--no-progress",
    ]  # fmt: skip


def _run(config: Path, run_dir: Path) -> None:
    subprocess.run(_command(config, run_dir), check=True, capture_output=True, timeout=600)


@pytest.mark.slow  # three pretrain runs in subprocesses (about 35 s)
def test_sigkill_then_resume_matches_uninterrupted(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_config(tmp_path / "unused", corpus)))

    killed = tmp_path / "killed"
    kill_at_first_checkpoint(_command(config, killed), killed / "pretrain" / "checkpoints")
    assert not (killed / "pretrain" / "result.json").exists()

    _run(config, killed)  # resumes
    clean = tmp_path / "clean"
    _run(config, clean)

    assert_same_phase(killed / "pretrain", clean / "pretrain")
    assert (killed / "pretrain" / "loss.png").is_file()
    assert any((killed / "pretrain" / "tensorboard").iterdir())
