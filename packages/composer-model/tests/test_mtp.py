"""Multi-token prediction: document-aware shifting, both targets, speculative decoding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import micro_config

from composer_model import (
    ComposerModel,
    InferenceEngine,
    Labels,
    ModelOutput,
    PackedRow,
    SamplingParams,
    WholeRow,
    document_targets,
    lm_forward_loss,
    load_pretrained,
    save_pretrained,
)
from composer_model.engine import sampling_logprobs
from composer_model.losses import IGNORE, mtp_loss
from composer_model.training import step_labels


def _labels(ids: torch.Tensor, out: ModelOutput) -> Labels:
    """The training step's labels of a forward on a whole [B, T] batch (teachers included)."""
    row = PackedRow.of(ids)
    return step_labels(row, WholeRow(row.cu_seqlens), out, teachers=True)


def test_targets_never_cross_a_document_boundary() -> None:
    ids = torch.tensor([10, 11, 12, 20, 21, 22, 23])
    cu = torch.tensor([0, 3, 7])
    assert document_targets(ids, cu, 1).tolist() == [11, 12, IGNORE, 21, 22, 23, IGNORE]
    assert document_targets(ids, cu, 2).tolist() == [12, IGNORE, IGNORE, 22, 23, IGNORE, IGNORE]


def test_mtp_outputs_of_a_document_ignore_the_next_document() -> None:
    model = ComposerModel(micro_config()).eval()
    a = torch.randint(0, 128, (8,))
    cu = torch.tensor([0, 8, 14])
    with torch.no_grad():
        one = model(
            torch.cat([a, torch.randint(0, 128, (6,))])[None], cu_seqlens=cu, return_mtp=True
        )
        two = model(
            torch.cat([a, torch.randint(0, 128, (6,))])[None], cu_seqlens=cu, return_mtp=True
        )
    assert one.mtp_logits is not None and two.mtp_logits is not None
    # Depth 1 at t reads token t+1: positions 0..6 of document A only see document A.
    torch.testing.assert_close(one.mtp_logits[0][0, :7], two.mtp_logits[0][0, :7])


def test_self_distillation_target_is_detached() -> None:
    model = ComposerModel(micro_config()).train()
    ids = torch.randint(0, 128, (2, 16))
    out = model(ids, return_mtp=True)
    out.logits.retain_grad()
    # A teacher that still carries the graph: the loss itself must detach it.
    main = out.logits.reshape(-1, out.logits.shape[-1])
    labels = Labels(tokens=_labels(ids, out).tokens, teachers=[torch.roll(main, -1, dims=0)])
    mtp_loss(out, labels, "self_distill").backward()
    assert out.logits.grad is None or out.logits.grad.abs().sum() == 0
    assert model.mtp_modules[0].eh_proj.weight.grad is not None


def test_detached_trunk_trains_the_mtp_modules_only() -> None:
    """RL's setting: the MTP loss moves no weight the policy's tokens come from (trunk,
    embedding, head), the MTP modules still learn, and the logits are the same."""
    model = ComposerModel(micro_config()).train()
    ids = torch.randint(0, 128, (2, 16))
    attached = model(ids, return_mtp=True)
    out = model(ids, return_mtp=True, mtp_detach_trunk=True)
    assert attached.mtp_logits is not None and out.mtp_logits is not None
    torch.testing.assert_close(out.mtp_logits[0], attached.mtp_logits[0])
    mtp_loss(out, _labels(ids, out), "self_distill").backward()
    for name, param in model.named_parameters():
        grad = param.grad
        moved = grad is not None and bool(grad.abs().sum() > 0)
        if name.startswith("mtp."):
            continue
        assert not moved, f"{name} got a gradient from the MTP loss"
    assert model.mtp_modules[0].eh_proj.weight.grad is not None
    assert model.mtp_modules[0].eh_proj.weight.grad.abs().sum() > 0
    # Without the detach the same loss reaches the trunk (so the check above can fail).
    model.zero_grad(set_to_none=True)
    attached = model(ids, return_mtp=True)
    mtp_loss(attached, _labels(ids, attached), "self_distill").backward()
    assert model.embed_tokens.weight.grad is not None
    assert model.embed_tokens.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("target", ["next_next", "self_distill"])
def test_both_targets_train(target: str) -> None:
    model = ComposerModel(micro_config(mtp_target=target, mtp_loss_weight=1.0)).train()
    ids = torch.randint(0, 16, (4, 24))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = last = None
    for _ in range(12):
        result = lm_forward_loss(model, ids)
        result.loss.backward()
        opt.step()
        opt.zero_grad()
        first = first if first is not None else result.mtp_loss.item()
        last = result.mtp_loss.item()
    assert first is not None and last is not None and last < first


def _trained_on_a_cycle() -> tuple[ComposerModel, list[list[int]]]:
    """A micro model that has learned a fixed token cycle, so MTP drafts are mostly right."""
    torch.manual_seed(1)
    cycle = torch.randperm(128)[:12]
    model = ComposerModel(micro_config(mtp_target="next_next", mtp_loss_weight=1.0)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(60):
        starts = torch.randint(0, 12, (4,))
        ids = torch.stack([cycle[(s + torch.arange(32)) % 12] for s in starts])
        result = lm_forward_loss(model, ids)
        result.loss.backward()
        opt.step()
        opt.zero_grad()
    prompts = [cycle[(s + torch.arange(5)) % 12].tolist() for s in range(3)] + [[3, 1, 4, 1, 5]]
    return model.double().eval(), prompts


@pytest.mark.slow
def test_speculative_greedy_is_identical_to_plain_greedy() -> None:
    model, prompts = _trained_on_a_cycle()
    params = SamplingParams(
        temperature=0.0, max_new_tokens=24, stop_token_ids=[], return_routing=True
    )
    plain = InferenceEngine(model, max_batch_size=4).generate(prompts, params)
    engine = InferenceEngine(model, max_batch_size=2, speculative=True)
    fast = engine.generate(prompts, params)
    for a, b in zip(plain, fast, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)
        assert a.routing is not None and b.routing is not None and torch.equal(a.routing, b.routing)
    assert engine.stats.drafted > 0
    assert engine.stats.acceptance_rate > 0.5  # learned cycle: most drafts are right
    assert engine.stats.accepted < engine.stats.drafted or engine.stats.steps < sum(
        len(r.token_ids) for r in plain
    )


def test_speculative_needs_mtp() -> None:
    with pytest.raises(ValueError, match="MTP"):
        InferenceEngine(ComposerModel(micro_config(num_nextn_predict_layers=0)), speculative=True)


def test_speculative_sampling_reports_main_model_logprobs() -> None:
    model = ComposerModel(micro_config()).double().eval()
    params = SamplingParams(temperature=0.8, top_k=20, max_new_tokens=12, stop_token_ids=[], seed=5)
    engine = InferenceEngine(model, speculative=True)
    results = engine.generate([[3, 1, 4, 1, 5], [9, 2, 6]], params)
    assert engine.stats.drafted > 0
    for result in results:
        full = torch.tensor([result.prompt_ids + result.token_ids])
        with torch.no_grad():
            logits = model(full).logits[0]
        start = len(result.prompt_ids)
        expected = [
            float(sampling_logprobs(logits[start - 1 + i], params)[t])
            for i, t in enumerate(result.token_ids)
        ]
        assert result.logprobs == pytest.approx(expected, abs=1e-6)  # sampling runs in fp32


@pytest.mark.slow
def test_speculative_sampling_matches_the_plain_distribution() -> None:
    model = ComposerModel(micro_config()).double().eval()
    with torch.no_grad():
        model.mtp_modules[0].eh_proj.weight.normal_(0, 0.5)  # an imperfect draft: both branches run
    prompt = [3, 1, 4, 1, 5]
    runs = 600

    def second_tokens(speculative: bool) -> torch.Tensor:
        params = [
            SamplingParams(temperature=1.0, top_k=4, max_new_tokens=2, stop_token_ids=[], seed=s)
            for s in range(runs)
        ]
        engine = InferenceEngine(model, max_batch_size=64, speculative=speculative)
        out = engine.generate([prompt] * runs, params)
        if speculative:
            assert 0 < engine.stats.accepted < engine.stats.drafted
        return (
            torch.bincount(torch.tensor([r.token_ids[1] for r in out]), minlength=128).double()
            / runs
        )

    plain, fast = second_tokens(False), second_tokens(True)
    total_variation = 0.5 * (plain - fast).abs().sum()
    assert total_variation < 0.12


def test_two_mtp_depths_chain_train_and_round_trip(tmp_path: Path) -> None:
    model = ComposerModel(micro_config(num_nextn_predict_layers=2)).train()
    ids = torch.randint(0, 128, (2, 16))
    result = lm_forward_loss(model, ids, mtp_weight=1.0, mtp_target="next_next")
    assert result.output.mtp_logits is not None and len(result.output.mtp_logits) == 2
    result.loss.backward()
    assert all(m.eh_proj.weight.grad is not None for m in model.mtp_modules)
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path).eval()
    model.eval()
    with torch.no_grad():
        a, b = model(ids, return_mtp=True), loaded(ids, return_mtp=True)
    assert a.mtp_logits is not None and b.mtp_logits is not None
    assert torch.equal(a.mtp_logits[1], b.mtp_logits[1])
