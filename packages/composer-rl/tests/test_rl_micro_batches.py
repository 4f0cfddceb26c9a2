"""An RL step in micro-batches is the same step as in one forward, with bounded memory.

A step of 64 long episodes in one forward held 12 GB and was killed on the 24 GB box, so
`rl_step` trains a process's share `train.micro_batch_tokens` at a time with accumulated
gradients. These tests fail if the cut changes what the step does: the loss, the gradient,
the weights it leaves, the MoE balancing update, the metrics (the KL estimators' variances
included, which do not add across parts) or the anchor's term, counted once a step.
"""

from __future__ import annotations

import copy

import pytest
import torch
from _parallel_rl_job import trajectories
from _services_support import micro_config

from composer_model import ComposerModel, OptimConfig, build_optimizer
from composer_model.training import StepStats
from composer_rl.rl import trainer
from composer_rl.rl.batch import micro_batches
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.services.training import TrainingConfig
from composer_rl.rl.trainer import rl_step
from composer_rl.stages.packing import Batch, make_batch, pack_documents


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_micro_batches_cut_in_order_within_the_budget() -> None:
    assert micro_batches([5, 5, 5, 5], 10) == [[0, 1], [2, 3]]
    assert micro_batches([5, 6, 5], 10) == [[0], [1], [2]]
    # A sequence over the budget is trained alone, never dropped or split.
    assert micro_batches([3, 30, 3, 3], 10) == [[0], [1], [2, 3]]
    assert micro_batches([3, 30, 3], None) == [[0, 1, 2]]
    assert micro_batches([], 10) == [] and micro_batches([], None) == []
    with pytest.raises(ValueError, match="budget must be > 0"):
        micro_batches([3], 0)
    assert TrainingConfig().micro_batch_tokens == 16384  # on by default


def _step(
    budget: int | None, *, anchor: Batch | None = None
) -> tuple[StepStats, ComposerModel, int]:
    """One RL step of the same batch from the same weights; also how many forwards ran."""
    torch.manual_seed(0)
    model = ComposerModel(micro_config())
    reference = copy.deepcopy(model)
    with torch.no_grad():  # a reference that differs, so the KL metrics are not zero
        for p in reference.parameters():
            p.add_(0.02 * torch.randn_like(p))
    optimizer = build_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.0, warmup_steps=0))
    config = RLLossConfig(is_cap=2.0, mtp_weight=0.1, kl_coef=0.05, anchor_weight=0.5)
    calls = 0
    forward = trainer.rl_forward_loss

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return forward(*args, **kwargs)  # type: ignore[arg-type]

    trainer.rl_forward_loss = counted  # type: ignore[assignment]
    try:
        stats = rl_step(
            model,
            optimizer,
            trajectories(3, count=7),
            config,
            grad_clip=None,
            reference=reference,
            anchor=anchor,
            micro_batch_tokens=budget,
        )
    finally:
        trainer.rl_forward_loss = forward
    return stats, model, calls


def test_a_step_in_micro_batches_is_the_step_in_one_forward() -> None:
    whole, whole_model, one = _step(None)
    cut, cut_model, many = _step(40)  # the 7 episodes are 7-28 tokens: 4 or more parts
    assert one == 1 and many >= 4
    assert cut.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-7)
    assert cut.grad_norm == pytest.approx(whole.grad_norm, rel=1e-5)
    assert set(cut.metrics) == set(whole.metrics)
    for key, value in whole.metrics.items():
        assert cut.metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key
    # The variances are the whole batch's, not a sum of the parts' (which would be larger).
    assert whole.metrics["kl_k1_var"] > 0 and "kl_k1_sq" not in cut.metrics
    cut_state = cut_model.state_dict()
    # Adam divides each gradient by its own size, so an element whose gradient is near
    # Adam's eps turns the parts' other summation order into an update that differs by
    # about 1e-6 (lm_head, one element in 4,096, on torch 2.x CPU): 1e-5 is a thousandth of
    # this step's lr, and a part left out or counted twice moves most weights by ~lr.
    for name, value in whole_model.state_dict().items():  # weights and balancing biases
        torch.testing.assert_close(cut_state[name], value, rtol=1e-5, atol=1e-5, msg=name)


def test_the_anchor_term_counts_once_a_step() -> None:
    rng = torch.Generator().manual_seed(1)
    ids = [torch.randint(1, 60, (20,), generator=rng).tolist() for _ in range(2)]
    masks = [[False] * 8 + [True] * 12 for _ in ids]  # a prompt, then the agent's turn
    demo = make_batch(pack_documents(ids, 32, 0, masks=masks, split_documents=False), [0, 1])
    whole, _, _ = _step(None, anchor=demo)
    cut, _, many = _step(40, anchor=demo)
    assert many >= 4
    assert cut.metrics["anchor_loss"] == pytest.approx(whole.metrics["anchor_loss"], rel=1e-5)
    assert cut.loss == pytest.approx(whole.loss, rel=1e-5)
