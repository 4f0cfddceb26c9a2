"""The hooks a parallel run threads through the one training step, and the loss shares.

`train_step(..., parallel=hooks)` must call the hooks where a data/expert-parallel run
needs them (gradient sync after backward, the hooks' norm instead of torch's, the load
reduce for the balancing bias, the metric reduction), and `compute_loss` with the global
`denominators` must split a batch into shares that add up to the whole batch's loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import torch
from conftest import micro_config

from composer_model import (
    ComposerModel,
    OptimConfig,
    build_optimizer,
    compute_loss,
    target_counts,
    target_ids,
    train_step,
)
from composer_model.losses import lm_loss, mtp_loss


class RecordingHooks:
    """A one-process `ParallelHooks`: records the calls, doubles the reported metrics."""

    def __init__(self) -> None:
        self.calls: list[str] = []

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
        before = float(compute_loss(model, ids, cu_seqlens=cu, mtp_weight=0.0).loss)
    stats = train_step(
        model,
        optimizer,
        lambda: compute_loss(model, ids, cu_seqlens=cu, mtp_weight=0.0),
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
    whole = compute_loss(
        model, ids, cu_seqlens=cu, mtp_weight=0.3, mtp_target=target, loss_mask=mask
    )
    counts = target_counts(ids, cu, len(model.mtp_modules), mask)
    # two "ranks": documents 0-1 and document 2, each normalised by the whole batch's counts
    shares = [
        compute_loss(
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
def test_given_targets_teachers_and_shifted_ids_equal_the_whole_row_defaults() -> None:
    """What a context-parallel shard passes (computed on the whole row) gives the same
    terms as the defaults on the whole row: the shard path changes where, not what."""
    torch.manual_seed(0)
    model = ComposerModel(micro_config()).eval()
    ids, cu = _batch()
    flat = ids.reshape(-1)
    depths = len(model.mtp_modules)
    plain = model(ids, cu_seqlens=cu, return_mtp=True)
    shifted = [torch.roll(flat, -k) for k in range(1, depths + 1)]
    given = model(ids, cu_seqlens=cu, return_mtp=True, mtp_shifted_ids=shifted)
    assert given.mtp_logits is not None and plain.mtp_logits is not None
    torch.testing.assert_close(given.mtp_logits[0], plain.mtp_logits[0])
    lm = lm_loss(plain, ids, targets=target_ids(ids, cu, 1))
    assert float(lm) == pytest.approx(float(lm_loss(plain, ids)), rel=1e-6)
    main = plain.logits.reshape(-1, plain.logits.shape[-1])
    targets = [target_ids(ids, cu, k + 1) for k in range(1, depths + 1)]
    teachers = [torch.roll(main, -k, dims=0) for k in range(1, depths + 1)]
    for target in ("next_next", "self_distill"):
        ours = mtp_loss(plain, ids, target, targets=targets, teachers=teachers)
        assert float(ours) == pytest.approx(float(mtp_loss(plain, ids, target)), rel=1e-6)
