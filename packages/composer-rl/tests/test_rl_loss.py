"""The RL loss takes a forward's outputs: it lives in `rl/loss.py` and never calls the model.

The RL step (`rl/trainer.py`) shards the packed row once, runs the router-replayed forward of
the policy and the reference's, and hands the outputs to `rl_loss`. These tests fail if the
loss runs a model again (every `ComposerModel` forward is refused while it runs), if it
takes a model, or if its value drifts from the step's.
"""

from __future__ import annotations

import inspect
from unittest import mock

import pytest
import torch
from _parallel_rl_job import trajectories
from _services_support import micro_config

from composer_model import ComposerModel, WholeRow
from composer_model.training import run_forward, shard_row
from composer_rl.rl import loss as loss_module
from composer_rl.rl.batch import pack
from composer_rl.rl.loss import RLLossConfig, global_batch_of, rl_loss
from composer_rl.rl.trainer import rl_forward_loss, rl_row, rl_targets


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_the_rl_loss_gets_outputs_and_never_calls_the_model() -> None:
    for name, param in inspect.signature(rl_loss).parameters.items():
        assert "ComposerModel" not in str(param.annotation), name
        assert "Module" not in str(param.annotation), name
    assert rl_loss.__module__ == "composer_rl.rl.loss"
    assert "ComposerModel" not in vars(loss_module)  # the loss module holds no model at all
    torch.manual_seed(0)
    model = ComposerModel(micro_config())
    reference = ComposerModel(micro_config())
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():  # a reference that differs, so the KL terms are not zero
        for p in reference.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch = pack(trajectories(0))  # recorded experts for router replay
    config = RLLossConfig(mtp_weight=0.1, kl_coef=0.05)
    with torch.no_grad():
        stepped = rl_forward_loss(model, batch, config, reference=reference)
        # The step's pieces by hand: shard once, forward the policy and the reference.
        row = rl_row(batch, config)
        depths = len(model.mtp_modules)
        inputs = shard_row(row, WholeRow(batch.cu_seqlens), depths)
        output = run_forward(model, inputs, replay_guard=config.replay_guard, mtp_detach_trunk=True)
        reference_output = run_forward(reference, inputs, mtp=False)
        targets = rl_targets(batch, row, inputs, output, global_batch_of(batch, depths))
    refused = AssertionError("the loss ran the model")
    with mock.patch.object(ComposerModel, "forward", side_effect=refused):
        with pytest.raises(AssertionError, match="ran the model"):  # the patch bites
            model(batch.input_ids, cu_seqlens=batch.cu_seqlens)
        loss = rl_loss(output, targets, config, reference=reference_output)
    assert float(loss.loss) == pytest.approx(float(stepped.loss), rel=1e-6)
    assert loss.metrics.keys() == stepped.metrics.keys()
    for key, value in stepped.metrics.items():
        assert loss.metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert loss.metrics["mtp_loss"] > 0 and loss.metrics["kl_k3"] > 0  # both terms ran


def test_without_the_reference_output_there_is_no_kl() -> None:
    torch.manual_seed(0)
    model = ComposerModel(micro_config())
    batch = pack(trajectories(1))
    config = RLLossConfig(mtp_weight=0.0, kl_coef=0.05)
    with torch.no_grad():
        row = rl_row(batch, config)
        inputs = shard_row(row, WholeRow(batch.cu_seqlens))
        output = run_forward(model, inputs, replay_guard=config.replay_guard)
        targets = rl_targets(batch, row, inputs, output, global_batch_of(batch, 0))
        loss = rl_loss(output, targets, config)
    assert loss.metrics["kl_k1"] == 0.0 and "mtp_loss" not in loss.metrics
    assert loss.metrics["sampled_tokens"] == float(batch.target_mask.sum())
