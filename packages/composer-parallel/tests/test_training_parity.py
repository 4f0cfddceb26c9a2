"""Four processes (dp=2, cp=2, ep=4, gloo) train the tiny model like one process does;
MTP under context parallelism (cp=2, ep=2) gives the whole row's terms and gradients, the
step sharding the row and the loss getting only the forward's outputs."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from composer_model import (
    ComposerModel,
    PackedRow,
    compute_loss,
    forward_row,
    lm_forward_loss,
    preset,
    target_counts,
)
from composer_model.training import run_forward, shard_row, step_labels
from composer_parallel.launch import run_local
from composer_parallel.mesh import ParallelDims
from composer_parallel.train import parallelize, run_training, synthetic_batches

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


def _mtp_under_cp(rank: int, world_size: int) -> dict[str, float]:
    """cp=2 with the MTP term (self-distillation and next-next) against the whole row in
    one process: loss terms, every gradient, and the evaluation forward's MTP logits. The
    step's pieces run here one by one, and the loss runs with every model forward refused."""
    torch.manual_seed(0)
    reference = ComposerModel(preset("tiny"))  # one MTP module
    model = ComposerModel(preset("tiny"))
    model.load_state_dict(reference.state_dict())
    parallel = parallelize(model, ParallelDims(dp=1, cp=2, ep=2))
    assert type(model) is ComposerModel  # parallelized from outside, its class unchanged
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 500, (1, 37), generator=gen)
    cu = torch.tensor([0, 5, 19, 37], dtype=torch.int32)
    positions = torch.cat([torch.arange(5), torch.arange(14), torch.arange(18)])[None]
    counts = target_counts(ids, cu, 1)
    worst: dict[str, float] = {}
    for target in ("self_distill", "next_next"):
        for m in (reference, model):
            m.zero_grad(set_to_none=True)
        whole = lm_forward_loss(
            reference, ids, positions=positions, cu_seqlens=cu, mtp_weight=0.3, mtp_target=target
        )
        whole.loss.backward()
        # the step: shard the row once, run the forward, make the labels on the whole row
        row = PackedRow.of(ids, cu, positions)
        layout = parallel.layout(row.cu_seqlens)
        inputs = shard_row(row, layout, len(model.mtp_modules))
        output = run_forward(model, inputs)
        labels = step_labels(
            row, layout, output, teachers=target == "self_distill", denominators=counts
        )
        refused = AssertionError("the loss ran the model")
        with mock.patch.object(ComposerModel, "forward", side_effect=refused):
            share = compute_loss(output, labels, mtp_weight=0.3, mtp_target=target)
        share.loss.backward()
        with torch.no_grad():  # the composed objective the training loops call is the same
            composed = lm_forward_loss(
                model,
                ids,
                positions=positions,
                cu_seqlens=cu,
                mtp_weight=0.3,
                mtp_target=target,
                denominators=counts,
                parallel=parallel,
            )
        worst[f"{target}:composed"] = abs(float(composed.loss) / float(share.loss.detach()) - 1)
        parallel.sync_gradients(model)
        summed = parallel.reduce_metrics(share.metrics)
        for key in ("lm_loss", "mtp_loss"):
            ref = float(getattr(whole, key).detach())
            worst[f"{target}:{key}"] = abs(summed[key] / ref - 1)
        ref_grads = dict(reference.named_parameters())
        err = 0.0
        for name, p in model.named_parameters():
            if p.grad is None or "experts.w_" in name:  # expert shards: checked by the EP test
                continue
            g = ref_grads[name].grad
            assert g is not None, name
            err = max(err, float((p.grad - g).abs().max() / (g.abs().max() + 1e-12)))
        worst[f"{target}:grad"] = err
    with torch.no_grad():
        plain = reference(ids, positions=positions, cu_seqlens=cu, return_mtp=True)
        gathered = forward_row(model, PackedRow.of(ids, cu, positions), parallel=parallel, mtp=True)
    assert plain.mtp_logits is not None and gathered.mtp_logits is not None
    worst["eval_mtp_logits"] = float((plain.mtp_logits[0] - gathered.mtp_logits[0]).abs().max())
    try:  # the bare MTP forward on a shard would wrap its shifted ids: refused
        assert parallel.context is not None
        shard = parallel.context.shard(cu)
        with parallel.context.use(shard):
            model(
                shard.shard(ids.reshape(-1))[None],
                cu_seqlens=shard.local_cu_seqlens,
                return_mtp=True,
            )
        worst["refused"] = 0.0
    except RuntimeError:
        worst["refused"] = 1.0
    return worst


def test_mtp_under_context_parallelism_matches_the_whole_row() -> None:
    for worst in run_local(_mtp_under_cp, 2):
        assert worst.pop("refused") == 1.0
        assert worst.pop("eval_mtp_logits") < 1e-4
        for key, value in worst.items():
            assert value < 1e-4, (key, value)
