"""A pretraining run killed with SIGKILL resumes from its checkpoint and ends where an
uninterrupted run ends: same metrics record, same weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _stage_helpers import tiny_config, write_corpus
from safetensors.torch import load_file


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
    proc = subprocess.Popen(
        _command(config, killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 600
    checkpoints = killed / "pretrain" / "checkpoints"
    while time.monotonic() < deadline and proc.poll() is None:
        if checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "pretrain" / "result.json").exists()

    _run(config, killed)  # resumes
    clean = tmp_path / "clean"
    _run(config, clean)

    def record(run: Path) -> list[tuple[int, str, float]]:
        lines = (run / "pretrain" / "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(x) for x in lines]
        return [(r["step"], r["kind"], r.get("lm_loss", r.get("heldout_ce"))) for r in rows]

    resumed, reference = record(killed), record(clean)
    assert [r[:2] for r in resumed] == [r[:2] for r in reference]
    for (_, _, a), (_, _, b) in zip(resumed, reference, strict=True):
        assert abs(a - b) < 1e-4
    weights_a = load_file(str(killed / "pretrain" / "final" / "model.safetensors"))
    weights_b = load_file(str(clean / "pretrain" / "final" / "model.safetensors"))
    assert weights_a.keys() == weights_b.keys()
    for key in weights_a:
        torch.testing.assert_close(weights_a[key], weights_b[key], rtol=1e-4, atol=1e-5)
    assert (killed / "pretrain" / "loss.png").is_file()
    assert any((killed / "pretrain" / "tensorboard").iterdir())
