"""Stage one on a GPU (`device = "cuda"`): the same phases, the same checkpoints.

Skipped on a machine without CUDA (the CI runners, the 2-core development box); run on a
GPU machine with `uv run pytest packages/composer-rl/tests/test_stages_on_cuda.py`. The
CPU path is what every other stage test runs; these check that a GPU run trains the same
model (its first steps' losses within float32 reduction-order noise of the CPU's, from the
same initial weights) and exports a checkpoint the CPU loads and agrees with.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _services_support import micro_config, token_batch
from _stage_helpers import tiny_config, write_corpus

from composer_model import ComposerModel, load_pretrained
from composer_rl.cli import main
from composer_rl.stages.config import OptimConfig, PhaseConfig
from composer_rl.stages.loop import evaluate, train_phase
from composer_rl.stages.packing import pack_documents

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

LOSS_TOLERANCE = 2e-3
"""Relative: float32 on both, summed in another order on the GPU. A routing tie decided the
other way would move a loss by more; the first steps of a fresh micro model are unlikely to
meet one. Not yet run on a GPU: a failure there may be a tie, not a wrong path."""


def _losses(run_dir: Path) -> list[float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["lm_loss"] for r in rows if r["kind"] == "train"]


def test_a_phase_on_the_gpu_trains_as_on_the_cpu(tmp_path: Path) -> None:
    train = pack_documents(token_batch(seed=0, rows=8, length=40), 32, eos_id=0)
    phase = PhaseConfig(
        name="p", steps=3, seq_len=32, rows_per_step=2, eval_every=3, eval_rows=2,
        checkpoint_every=3, optim=OptimConfig(warmup_steps=1),
    )  # fmt: skip
    results = {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        model = ComposerModel(micro_config()).to(device)
        results[device] = train_phase(
            model, phase, train, train, tmp_path / device, show_progress=False
        )
        assert next(model.parameters()).device.type == device
    cpu, gpu = _losses(tmp_path / "cpu"), _losses(tmp_path / "cuda")
    assert gpu == pytest.approx(cpu, rel=LOSS_TOLERANCE)
    assert results["cuda"].final_eval["heldout_ce"] == pytest.approx(
        results["cpu"].final_eval["heldout_ce"], rel=LOSS_TOLERANCE
    )


def test_pretrain_on_the_gpu_exports_a_model_the_cpu_loads(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    config = tmp_path / "stage1.json"
    run = tmp_path / "run"
    config.write_text(json.dumps({**tiny_config(run, corpus), "device": "cuda"}))
    assert main(["pretrain", "--config", str(config), "--no-progress"]) == 0
    final = run / "long_context" / "final"
    on_cpu = load_pretrained(final)
    on_gpu = load_pretrained(final, device="cuda")
    rows = pack_documents(token_batch(seed=1, rows=2, length=64), 64, eos_id=0)
    cpu_ce = evaluate(on_cpu, rows, 2, 2)["heldout_ce"]
    gpu_ce = evaluate(on_gpu, rows, 2, 2)["heldout_ce"]
    assert gpu_ce == pytest.approx(cpu_ce, rel=LOSS_TOLERANCE)
    summary = json.loads((run / "pretrain" / "result.json").read_text())
    assert summary["steps"] == 8
