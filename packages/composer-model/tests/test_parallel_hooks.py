"""The hooks a parallel run threads through the one training step, and the loss shares.

`train_step(..., parallel=hooks)` must call the hooks where a data/expert-parallel run
needs them (gradient sync after backward, the hooks' norm instead of torch's, the load
reduce for the balancing bias, the metric reduction), the step's objective with the global
`denominators` must split a batch into shares that add up to the whole batch's loss, and
the loss itself takes a forward's outputs: it never calls the model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from conftest import micro_config

from composer_model import (
    ComposerModel,
    OptimConfig,
    PackedRow,
    WholeRow,
    build_optimizer,
    compute_loss,
    lm_forward_loss,
    target_counts,
    target_ids,
    train_step,
)
from composer_model.losses import IGNORE, lm_loss, mtp_loss
from composer_model.training import run_forward, shard_row, step_labels


class RecordingHooks:
    """A one-process `ParallelHooks`: records the calls, doubles the reported metrics."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def layout(self, cu_seqlens: torch.Tensor) -> WholeRow:
        return WholeRow(cu_seqlens)

    def sync_gradients(self, model: torch.nn.Module) -> None:
        assert any(p.grad is not None for p in model.parameters()), "called before backward"
        self.calls.append("sync")

    def clip(self, model: torch.nn.Module, max_norm: float | None) -> float:
        self.calls.append("clip")
        return 0.25

    def load_reduce(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        self.calls.append("load_reduce")

        def reduce(load: torch.Tensor) -> torch.Tensor:
            self.calls.append("reduce")
            return load

        return reduce

    def reduce_metrics(self, metrics: Mapping[str, float]) -> dict[str, float]:
        self.calls.append("metrics")
        return {k: 2 * v for k, v in metrics.items()}


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (1, 30), generator=gen)
    return ids, torch.tensor([0, 9, 17, 30], dtype=torch.int32)


def test_train_step_calls_the_parallel_hooks_in_order() -> None:
    torch.manual_seed(0)
    model = ComposerModel(micro_config())
    optimizer = build_optimizer(model, OptimConfig(warmup_steps=0))
    ids, cu = _batch()
    hooks = RecordingHooks()
    with torch.no_grad():
        before = float(lm_forward_loss(model, ids, cu_seqlens=cu, mtp_weight=0.0).loss)
    stats = train_step(
        model,
        optimizer,
        lambda: lm_forward_loss(model, ids, cu_seqlens=cu, mtp_weight=0.0),
        grad_clip=1.0,
        parallel=hooks,
    )
    assert hooks.calls[:2] == ["sync", "clip"]
    assert "load_reduce" in hooks.calls and "reduce" in hooks.calls
    assert hooks.calls[-1] == "metrics"
    assert stats.grad_norm == 0.25  # the hooks' global norm, not torch's local one
    # the reported loss and metrics are the hooks' reduction of this rank's values
    assert stats.loss == pytest.approx(2 * before, rel=1e-5)
    assert stats.metrics["lm_loss"] == pytest.approx(2 * before, rel=1e-5)


@pytest.mark.parametrize("target", ["next_next", "self_distill"])
@torch.no_grad()
def test_loss_shares_with_global_denominators_add_up_to_the_batch_loss(target: str) -> None:
    torch.manual_seed(0)
    model = ComposerModel(micro_config()).eval()
    ids, cu = _batch()
    mask = torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) > 0.2
    whole = lm_forward_loss(
        model, ids, cu_seqlens=cu, mtp_weight=0.3, mtp_target=target, loss_mask=mask
    )
    counts = target_counts(ids, cu, len(model.mtp_modules), mask)
    # two "ranks": documents 0-1 and document 2, each normalised by the whole batch's counts
    shares = [
        lm_forward_loss(
            model,
            ids[:, a:b],
            cu_seqlens=(cu_part - a).to(torch.int32),
            mtp_weight=0.3,
            mtp_target=target,
            loss_mask=mask[:, a:b],
            denominators=counts,
        )
        for a, b, cu_part in ((0, 17, cu[:3]), (17, 30, cu[2:]))
    ]
    assert float(sum(s.lm_loss for s in shares)) == pytest.approx(float(whole.lm_loss), rel=1e-5)
    assert float(sum(s.mtp_loss for s in shares)) == pytest.approx(float(whole.mtp_loss), rel=1e-5)


@torch.no_grad()
def test_the_steps_mtp_inputs_and_labels_give_the_whole_rows_terms() -> None:
    """What the step hands the model and the loss (MTP inputs, targets and teachers, made
    on the whole row; under cp they are then sharded) gives the terms computed by hand on
    the whole row: the step changes where things are computed, not what."""
    torch.manual_seed(0)
    model = ComposerModel(micro_config()).eval()
    ids, cu = _batch()
    flat = ids.reshape(-1)
    row = PackedRow.of(ids, cu)
    layout = WholeRow(row.cu_seqlens)
    output = run_forward(model, shard_row(row, layout, len(model.mtp_modules)))
    plain = model(ids, cu_seqlens=cu, return_mtp=True)  # the model's own roll of the ids
    assert output.mtp_logits is not None and plain.mtp_logits is not None
    torch.testing.assert_close(output.mtp_logits[0], plain.mtp_logits[0])
    labels = step_labels(row, layout, output, teachers=True)
    vocab = output.logits.shape[-1]
    main = output.logits.reshape(-1, vocab).float()
    by_hand_lm = F.cross_entropy(main, target_ids(ids, cu, 1), ignore_index=IGNORE)
    assert float(lm_loss(output.logits, labels.tokens[0])) == pytest.approx(
        float(by_hand_lm), rel=1e-6
    )
    draft = output.mtp_logits[0].reshape(-1, vocab).float()
    ahead = target_ids(ids, cu, 2)  # depth 1 at t predicts t+2, inside t's document
    valid = ahead != IGNORE
    by_hand = {
        "next_next": F.cross_entropy(draft, ahead, ignore_index=IGNORE),
        "self_distill": F.kl_div(
            F.log_softmax(draft[valid], -1),
            F.log_softmax(torch.roll(main, -1, dims=0)[valid], -1),
            log_target=True,
            reduction="sum",
        )
        / int(valid.sum()),
    }
    assert flat.numel() == labels.tokens[1].numel()
    for target, value in by_hand.items():
        assert float(mtp_loss(output, labels, target)) == pytest.approx(float(value), rel=1e-5)


def test_the_loss_takes_outputs_and_never_calls_the_model() -> None:
    """`compute_loss` gets a forward's outputs and labels, no model: with every
    `ComposerModel` forward refused while it runs, it still gives the step's loss."""
    for name, param in inspect.signature(compute_loss).parameters.items():
        assert "Module" not in str(param.annotation), name
        assert "ComposerModel" not in str(param.annotation), name
    torch.manual_seed(0)
    model = ComposerModel(micro_config()).eval()
    ids, cu = _batch()
    with torch.no_grad():
        stepped = lm_forward_loss(model, ids, cu_seqlens=cu, mtp_weight=0.3)
        row = PackedRow.of(ids, cu)
        layout = WholeRow(row.cu_seqlens)
        output = run_forward(model, shard_row(row, layout, len(model.mtp_modules)))
        labels = step_labels(row, layout, output, teachers=True)
    refused = AssertionError("the loss ran the model")
    with mock.patch.object(ComposerModel, "forward", side_effect=refused):
        with pytest.raises(AssertionError, match="ran the model"):  # the patch bites
            model(ids, cu_seqlens=cu)
        loss = compute_loss(output, labels, mtp_weight=0.3, mtp_target="self_distill")
    assert float(loss.loss) == pytest.approx(float(stepped.loss), rel=1e-6)
    assert float(loss.mtp_loss) > 0
