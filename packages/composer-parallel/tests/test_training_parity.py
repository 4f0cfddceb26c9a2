"""Four processes (dp=2, cp=2, ep=4, gloo) train the tiny model like one process does."""

from __future__ import annotations

import pytest

from composer_model import preset
from composer_parallel.launch import run_local
from composer_parallel.mesh import ParallelDims
from composer_parallel.train import run_training, synthetic_batches

STEPS = 5


@pytest.mark.slow
def test_dp2_cp2_ep4_matches_single_process_loss_curve() -> None:
    config = preset("tiny", num_nextn_predict_layers=0)  # MTP is not context-parallel yet
    batches = synthetic_batches(config.vocab_size, STEPS, docs=6, seed=1)
    single = run_training(0, 1, ParallelDims(), config, batches)
    results = run_local(run_training, 4, ParallelDims(dp=2, cp=2, ep=4), config, batches)
    for result in results:  # every rank reports the same global loss
        assert result["losses"] == pytest.approx(single["losses"], rel=2e-4, abs=2e-4)
        assert result["grad_norms"] == pytest.approx(single["grad_norms"], rel=2e-3)
    # the run trained: the loss went down over the few steps
    assert single["losses"][-1] < single["losses"][0] - 0.1
