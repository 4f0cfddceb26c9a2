"""The RL training step, data-, context- and expert-parallel under torchrun, equals one process.

Two gloo processes on loopback (dp=2 ep=2, or cp=2 ep=2) run `TrainingService.train_rl` on
the same trajectories (router replay, KL reference, MTP self-distillation) as a one-process
service (then one next-token `train_step` on five sequences): the loss, the gradient norm
and the objective's metrics (the ranks' shares summed) must match step for step, and the
exported policy (experts gathered to rank 0) must equal the one-process policy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _parallel_rl_job import STEPS, run

from composer_model import load_pretrained
from composer_parallel.launch import LOOPBACK, free_port

COMPARED = (
    "loss",
    "grad_norm",
    "pg_loss",
    "lm_loss",
    "mtp_loss",
    "sampled_tokens",
    "logprob_mismatch",
    "kl_k1",
    "kl_k3",
    "replay_replacements",
)


@pytest.mark.slow
@pytest.mark.parametrize(("dp", "cp"), [(2, 1), (1, 2)], ids=["dp2-ep2", "cp2-ep2"])
def test_train_rl_under_torchrun_matches_one_process(tmp_path: Path, dp: int, cp: int) -> None:
    single = run(tmp_path / "single")
    out = tmp_path / "parallel"
    out.mkdir()
    job = Path(__file__).parent / "_parallel_rl_job.py"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        LOOPBACK,
        "--master-port",
        str(free_port()),
        str(job),
        str(out),
        "--dp",
        str(dp),
        "--cp",
        str(cp),
        "--ep",
        "2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    parallel = json.loads((out / "stats.json").read_text())
    assert len(parallel) == STEPS + 1  # the RL steps, then one next-token step
    for ours, ref in zip(parallel, single, strict=True):
        assert ours.keys() == ref.keys()
        for key in (k for k in COMPARED if k in ref):
            assert ours[key] == pytest.approx(ref[key], rel=1e-3, abs=1e-5), key
        assert ours["version"] == ref["version"]
    assert single[-1]["mtp_loss"] > 0  # the MTP term ran (and was split by depth counts)
    assert single[0]["kl_k3"] > 0 or single[1]["kl_k3"] > 0  # the reference ran
    ranks = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ranks == ["rank-000", "rank-001"]
    full = load_pretrained(out / "final")
    ref_state = load_pretrained(tmp_path / "single" / "final").state_dict()
    for name, value in full.state_dict().items():
        torch.testing.assert_close(value, ref_state[name], rtol=0, atol=2e-3, msg=name)
