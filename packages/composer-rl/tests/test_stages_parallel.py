"""`composer-rl pretrain --dp 2 --cp 2 --ep 4` under torchrun trains like one process.

Four gloo processes on loopback run the real command (`python -m torch.distributed.run
-m composer_rl.cli pretrain`); the same config in one process is the reference. The loss
curve must match step for step, the exported `final/` model (expert shards gathered
to rank 0) must load into a single-process model equal to the reference's, and a phase
extended past its end resumes from the per-rank checkpoints like the one process does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _stage_helpers import tiny_config, write_corpus

from composer_model import load_pretrained
from composer_parallel.launch import LOOPBACK, free_port
from composer_rl.stages.config import load_stage1_config
from composer_rl.stages.metrics import read_metrics
from composer_rl.stages.pretrain import run_pretrain

STEPS = 4


def _config(tmp_path: Path, run_dir: Path, steps: int = STEPS) -> Path:
    data = tiny_config(run_dir, write_corpus(tmp_path / "corpus.jsonl"))
    pretrain = dict(data["pretrain"])  # type: ignore[call-overload]
    # 4 rows a step (2 a dp rank); MTP joins at step 2 (under cp: inputs, targets and
    # teacher from the whole row)
    pretrain.update(steps=steps, rows_per_step=4, mtp_join_step=2, checkpoint_every=2)
    data["pretrain"] = pretrain
    path = tmp_path / f"{run_dir.name}.json"
    path.write_text(json.dumps(data))
    return path


def _train_losses(run_dir: Path, key: str = "loss") -> list[float]:
    records = read_metrics(run_dir / "pretrain")
    return [float(r[key]) for r in records if r["kind"] == "train"]


@pytest.mark.slow
def test_pretrain_dp2_cp2_ep4_under_torchrun_matches_one_process(tmp_path: Path) -> None:
    single_dir = tmp_path / "single"
    single = run_pretrain(load_stage1_config(_config(tmp_path, single_dir)), show_progress=False)
    assert single["steps"] == STEPS

    parallel_dir = tmp_path / "parallel"
    parallel_dir.mkdir()
    for name in ("tokenizer.json", "tokens.pt"):  # the same tokens, not a retrained tokenizer
        shutil.copy(single_dir / name, parallel_dir / name)
    _torchrun(_config(tmp_path, parallel_dir), parallel_dir)

    # one loss curve, the single process's (rank 0 alone wrote metrics)
    reference, parallel = _train_losses(single_dir), _train_losses(parallel_dir)
    assert len(parallel) == STEPS
    assert parallel == pytest.approx(reference, rel=1e-4)
    assert reference[-1] < reference[0]
    mtp = _train_losses(parallel_dir, "mtp_loss")
    assert mtp[:2] == [0.0, 0.0] and min(mtp[2:]) > 0  # MTP joined at step 2 under cp
    assert mtp == pytest.approx(_train_losses(single_dir, "mtp_loss"), rel=1e-4)
    result = json.loads((parallel_dir / "pretrain" / "result.json").read_text())
    assert result["mtp_joined_at"] == 2
    assert result["mtp_acceptance"] == pytest.approx(single["mtp_acceptance"], rel=1e-4)
    assert result["parallel"] == {"dp": 2, "cp": 2, "ep": 4, "cp_mode": "allgather"}
    assert result["heldout_ce"] == pytest.approx(single["heldout_ce"], rel=1e-4)
    # per-rank step checkpoints, one directory a rank
    ranks = sorted(p.name for p in (parallel_dir / "pretrain" / "checkpoints").iterdir())
    assert ranks == ["rank-000", "rank-001", "rank-002", "rank-003"]

    # the exported model is the whole model: it loads into one process and equals the
    # single-process model up to the float noise of four steps (max 1.2e-4 measured;
    # Adam moves a weight whose gradient is near zero by up to lr = 3e-3 on float noise)
    full = load_pretrained(parallel_dir / "pretrain" / "final")
    ref = load_pretrained(single_dir / "pretrain" / "final")
    ref_state = ref.state_dict()
    assert full.state_dict().keys() == ref_state.keys()
    for name, value in full.state_dict().items():
        assert value.shape == ref_state[name].shape, name
        torch.testing.assert_close(value, ref_state[name], rtol=0, atol=5e-4, msg=name)

    # extend both runs by two steps: each rank resumes from its own step-4 checkpoint
    for run_dir in (single_dir, parallel_dir):
        (run_dir / "pretrain" / "result.json").unlink()
    run_pretrain(load_stage1_config(_config(tmp_path, single_dir, STEPS + 2)), show_progress=False)
    _torchrun(_config(tmp_path, parallel_dir, STEPS + 2), parallel_dir)
    reference, parallel = _train_losses(single_dir), _train_losses(parallel_dir)
    assert len(parallel) == STEPS + 2
    assert parallel == pytest.approx(reference, rel=1e-4)


def _torchrun(config: Path, run_dir: Path) -> None:
    """`composer-rl pretrain --dp 2 --cp 2 --ep 4` on four loopback gloo processes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "--master-addr",
        LOOPBACK,
        "--master-port",
        str(free_port()),
        "-m",
        "composer_rl.cli",
        "pretrain",
        "--config",
        str(config),
        "--run-dir",
        str(run_dir),
        "--dp",
        "2",
        "--cp",
        "2",
        "--ep",
        "4",
        "--skip-long-context",
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_dims_without_a_matching_process_group_are_refused() -> None:
    from composer_model import ComposerModel, preset
    from composer_rl.stages.config import ParallelConfig

    model = ComposerModel(preset("tiny"))
    assert ParallelConfig().apply(model) is None  # one process: nothing to parallelize
    with pytest.raises(ValueError, match=r"needs 4 processes.*sees 1.*nproc-per-node 4"):
        ParallelConfig(dp=2, cp=2, ep=4).apply(model)
