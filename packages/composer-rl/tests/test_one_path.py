"""One loss, one step, one optimizer builder: the stage phases and the training service
take the same step on the same loss, and the stage objective is `compute_loss` itself.

Each test here fails if a second path comes back: a stage loss that ignores
`ModelConfig.mtp_target` or leaves the MTP term unmasked in SFT (the drift this replaced),
or a service step that differs from the stage step in loss, optimizer or update.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _services_support import micro_config, token_batch

from composer_model import ComposerModel, LossOutput, OptimConfig, build_optimizer, train_step
from composer_model.model import positions_from_cu_seqlens
from composer_rl.rl.services import TrainingConfig, TrainingService
from composer_rl.rl.services._common import pack_sequences
from composer_rl.stages.config import PhaseConfig
from composer_rl.stages.loop import batch_loss, phase_step
from composer_rl.stages.packing import Batch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _batch(sequences: list[list[int]], vocab: int, mask: torch.Tensor | None = None) -> Batch:
    input_ids, cu_seqlens = pack_sequences(sequences, vocab)
    total = input_ids.numel()
    return Batch(
        input_ids=input_ids,
        positions=positions_from_cu_seqlens(cu_seqlens, total).reshape(1, -1),
        cu_seqlens=cu_seqlens,
        mask=torch.ones_like(input_ids, dtype=torch.bool) if mask is None else mask,
    )


def test_the_stage_step_and_the_service_step_give_the_same_loss_and_update(
    tmp_path: Path,
) -> None:
    # next_next: the target the old stage loss silently replaced by self-distillation.
    config = micro_config().model_copy(update={"mtp_target": "next_next"})
    optim = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.1, min_lr_ratio=1.0)
    service = TrainingService(
        config, (tmp_path / "store").as_uri(), config=TrainingConfig(optim=optim, seed=3)
    )
    try:
        stage_model = ComposerModel(config)
        stage_model.load_state_dict(service.model.state_dict())
        before = {k: v.clone() for k, v in stage_model.state_dict().items()}
        sequences = token_batch(seed=5, rows=3, length=20)

        served = service.train_step(sequences).metrics()
        phase = PhaseConfig(
            name="same", steps=10, seq_len=64, optim=optim, mtp_weight=config.mtp_loss_weight
        )
        staged = phase_step(
            stage_model,
            build_optimizer(stage_model, optim),
            phase,
            _batch(sequences, config.vocab_size),
            step=0,
            mtp_on=True,
        )
    finally:
        service.close()

    assert staged.metrics["mtp_loss"] > 0
    for key in ("loss", "lm_loss", "mtp_loss", "grad_norm", "lr"):
        assert staged.as_dict()[key] == pytest.approx(served[key], rel=1e-6), key
    after_stage, after_service = stage_model.state_dict(), service.model.state_dict()
    assert any(not torch.equal(before[k], after_stage[k]) for k in before)  # it did step
    for key, tensor in after_stage.items():
        torch.testing.assert_close(tensor, after_service[key], rtol=1e-6, atol=1e-7, msg=key)


def test_the_stage_objective_honours_the_model_configs_mtp_target() -> None:
    torch.manual_seed(0)
    sequences = token_batch(seed=1, rows=2, length=16)
    values = {}
    for target in ("next_next", "self_distill"):
        config = micro_config().model_copy(update={"mtp_target": target})
        torch.manual_seed(0)
        model = ComposerModel(config)
        batch = _batch(sequences, config.vocab_size)
        values[target] = float(batch_loss(model, batch, mtp_weight=1.0).mtp_loss.detach())
        if target == "next_next":
            # By hand: cross-entropy of MTP depth 1 at t against token t+2 of t's document.
            out = model(
                batch.input_ids,
                positions=batch.positions,
                cu_seqlens=batch.cu_seqlens,
                return_mtp=True,
            )
            logits = out.mtp_logits[0].reshape(-1, config.vocab_size)
            rows = [
                (start + t, start + t + 2)
                for start, end in zip(
                    batch.cu_seqlens[:-1].tolist(), batch.cu_seqlens[1:].tolist(), strict=True
                )
                for t in range(end - start - 2)
            ]
            ids = batch.input_ids.reshape(-1)
            expected = F.cross_entropy(
                logits[[r[0] for r in rows]].float(), ids[[r[1] for r in rows]]
            )
            assert values[target] == pytest.approx(float(expected.detach()), rel=1e-5)
    assert values["next_next"] != pytest.approx(values["self_distill"], rel=1e-3)


def test_in_sft_the_loss_mask_applies_to_the_mtp_term_too() -> None:
    config = micro_config().model_copy(update={"mtp_target": "next_next"})
    torch.manual_seed(0)
    model = ComposerModel(config)
    sequences = token_batch(seed=2, rows=2, length=16)
    plain = _batch(sequences, config.vocab_size)
    # A prompt/answer split: only the second half of each sequence is trained.
    mask = torch.tensor([[i % 16 >= 8 for i in range(32)]])
    masked = _batch(sequences, config.vocab_size, mask)

    unmasked_loss = batch_loss(model, plain, mtp_weight=1.0)
    masked_loss = batch_loss(model, masked, mtp_weight=1.0)
    out = masked_loss.output
    logits = out.mtp_logits[0].reshape(-1, config.vocab_size).float()
    ids = masked.input_ids.reshape(-1)
    # Depth 1 at t predicts t+2: the trained positions are those whose t+2 is in the mask.
    positions = [t for doc in (0, 16) for t in range(doc, doc + 14) if mask[0, t + 2]]
    expected = F.cross_entropy(logits[positions], ids[[t + 2 for t in positions]])
    assert float(masked_loss.mtp_loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    assert float(masked_loss.mtp_loss.detach()) != pytest.approx(
        float(unmasked_loss.mtp_loss.detach()), rel=1e-3
    )

    # A mask that trains nothing gives no MTP signal at all (not an unmasked one, not NaN).
    none = batch_loss(model, _batch(sequences, config.vocab_size, torch.zeros_like(mask)), 1.0)
    assert float(none.mtp_loss.detach()) == 0.0


def test_a_non_finite_loss_stops_the_step_before_the_weights_change() -> None:
    torch.manual_seed(0)
    model = ComposerModel(micro_config())
    optimizer = build_optimizer(model, OptimConfig(warmup_steps=0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = _batch(token_batch(seed=3, rows=1, length=12), model.config.vocab_size)

    def poisoned() -> LossOutput:
        out = batch_loss(model, batch, mtp_weight=0.0)
        out.loss = out.loss * float("nan")
        return out

    with pytest.raises(FloatingPointError, match=r"non-finite loss.*lower the learning rate"):
        train_step(model, optimizer, poisoned, grad_clip=1.0)
    for key, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[key]), key
    # In micro-batches, a poisoned part after a good one (already backpropagated) stops the
    # step too, and leaves no gradient of the good part behind for a later step to apply.
    with pytest.raises(FloatingPointError, match=r"non-finite loss"):
        train_step(
            model, optimizer, [lambda: batch_loss(model, batch, 0.0), poisoned], grad_clip=1.0
        )
    assert all(p.grad is None for p in model.parameters())
    for key, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[key]), key


def test_the_optimizer_decays_matrices_only() -> None:
    model = ComposerModel(micro_config())
    groups = build_optimizer(model, OptimConfig(weight_decay=0.1)).param_groups
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    for name, param in model.named_parameters():
        assert (id(param) in decayed) == (param.dim() >= 2), name
