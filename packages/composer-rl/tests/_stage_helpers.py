"""A tiny corpus and configuration that make every stage run in seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import torch
from safetensors.torch import load_file


def write_corpus(path: Path, documents: int = 80) -> Path:
    lines = []
    for i in range(documents):
        body = "".join(
            f"def function_{i}_{j}(value):\n    return value * {j} + {i}\n\n\n" for j in range(6)
        )
        lines.append(json.dumps({"id": f"doc{i}", "text": body}))
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_config(run_dir: Path, corpus: Path) -> dict[str, object]:
    phase = {
        "seq_len": 32,
        "rows_per_step": 2,
        "eval_every": 4,
        "eval_rows": 2,
        "checkpoint_every": 2,
        "optim": {"warmup_steps": 1},
    }
    return {
        "run_dir": str(run_dir),
        "threads": 1,
        "corpus": {
            "path": str(corpus),
            "vocab_size": 320,
            "heldout_fraction": 0.2,
            "tokenizer_chars": 50_000,
        },
        "pretrain": {**phase, "name": "pretrain", "steps": 8, "mtp_join_step": 4},
        "long_context": {**phase, "name": "long_context", "steps": 2, "seq_len": 64},
        "sft": {**phase, "name": "sft", "steps": 2, "seq_len": 384, "max_tasks": 13},
    }


def assert_same_phase(phase_a: Path, phase_b: Path) -> None:
    """Two runs of one phase (e.g. one killed and resumed, one not) logged the same steps
    with the same losses and ended with the same weights."""

    def record(phase: Path) -> list[tuple[int, str, float]]:
        rows = [json.loads(x) for x in (phase / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["kind"], r.get("lm_loss", r.get("heldout_ce"))) for r in rows]

    a, b = record(phase_a), record(phase_b)
    assert [r[:2] for r in a] == [r[:2] for r in b]
    for (_, _, x), (_, _, y) in zip(a, b, strict=True):
        assert abs(x - y) < 1e-4
    weights_a = load_file(str(phase_a / "final" / "model.safetensors"))
    weights_b = load_file(str(phase_b / "final" / "model.safetensors"))
    assert weights_a.keys() == weights_b.keys()
    for key in weights_a:
        torch.testing.assert_close(weights_a[key], weights_b[key], rtol=1e-4, atol=1e-5)


def kill_at_first_checkpoint(command: list[str], checkpoints: Path, timeout: float = 600) -> None:
    """Start `command` and SIGKILL it once a step checkpoint appears under `checkpoints`
    (a phase killed mid-run, as a crash or a pre-empted machine would)."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir()):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished (or failed) before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
