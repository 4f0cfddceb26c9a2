"""Forward-pass behaviour: packing, document isolation, dispatch, balancing bias, training."""

from __future__ import annotations

import pytest
import torch
from conftest import micro_config

from composer_model import ComposerModel
from composer_model.layers.moe import MoE


def test_packed_documents_match_separate_forwards() -> None:
    model = ComposerModel(micro_config()).eval()
    a, b = torch.randint(0, 128, (1, 9)), torch.randint(0, 128, (1, 14))
    packed = torch.cat([a, b], dim=1)
    cu = torch.tensor([0, 9, 23])
    with torch.no_grad():
        out = model(packed, cu_seqlens=cu)
        torch.testing.assert_close(out.logits[0, :9], model(a).logits[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(out.logits[0, 9:], model(b).logits[0], atol=1e-5, rtol=0)
    assert out.positions.tolist() == list(range(9)) + list(range(14))


def test_batch_rows_are_documents() -> None:
    model = ComposerModel(micro_config()).eval()
    ids = torch.randint(0, 128, (3, 11))
    with torch.no_grad():
        batched = model(ids).logits
        for row in range(3):
            torch.testing.assert_close(
                batched[row], model(ids[row : row + 1]).logits[0], atol=1e-5, rtol=0
            )


def test_expert_dispatch_matches_a_per_token_reference() -> None:
    config = micro_config()
    moe = MoE(config)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0, 0.1)
    x = torch.randn(17, config.hidden_size)
    out, routing = moe(x)
    expected = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for slot in range(config.num_experts_per_tok):
            e = int(routing.indices[t, slot])
            gate, up = (x[t] @ moe.experts.w_gate_up[e]).split(config.moe_intermediate_size)
            expected[t] += routing.weights[t, slot] * (
                (torch.nn.functional.silu(gate) * up) @ moe.experts.w_down[e]
            )
    assert moe.shared_experts is not None
    expected += moe.shared_experts(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_group_limit_keeps_every_token_inside_topk_groups() -> None:
    config = micro_config(n_routed_experts=8, n_group=4, topk_group=1, num_experts_per_tok=2)
    moe = MoE(config)
    torch.nn.init.normal_(moe.gate.weight, 0, 1.0)
    _, routing = moe(torch.randn(64, config.hidden_size))
    groups = routing.indices // 2
    assert (groups[:, 0] == groups[:, 1]).all()


def test_balancing_bias_follows_the_sign_rule() -> None:
    model = ComposerModel(micro_config()).train()
    model(torch.randint(0, 128, (2, 32)))
    loads = model.update_balancing_bias(rate=0.01)
    assert loads.shape == (3, 8)  # two MoE layers + the MTP block
    for layer, load in zip(model.moe_layers, loads[:2], strict=True):
        expected = 0.01 * torch.sign(load.mean() - load)
        torch.testing.assert_close(layer.gate.e_score_correction_bias, expected)
        assert layer.gate.tokens_per_expert.sum() == 0  # counters reset
    assert loads[0].sum() == 2 * 32 * 2


def test_bias_shifts_selection_but_not_gate_values() -> None:
    config = micro_config(n_group=1, topk_group=1)
    torch.manual_seed(0)
    moe = MoE(config)
    # Layers leave their weights uninitialised (the model initialises them all at once).
    with torch.no_grad():
        for param in moe.parameters():
            param.normal_(0.0, config.initializer_range)
    x = torch.randn(5, config.hidden_size)
    before = moe.gate(x)
    moe.gate.e_score_correction_bias[:] = torch.tensor([10.0, 10.0, 0, 0, 0, 0, 0, 0])
    after = moe.gate(x)
    assert (after.indices.sort(-1).values == torch.tensor([0, 1])).all()
    scores = moe.gate.scores(x)[:, :2]
    torch.testing.assert_close(
        after.weights.sort(-1).values,
        (scores / scores.sum(-1, keepdim=True) * config.routed_scaling_factor).sort(-1).values,
    )
    assert not torch.equal(before.indices, after.indices)


def test_a_few_steps_of_training_reduce_the_loss() -> None:
    model = ComposerModel(micro_config()).train()
    ids = torch.randint(0, 128, (4, 24))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        logits = model(ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, 128), ids[:, 1:].reshape(-1)
        )
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5


def test_bad_inputs_say_what_to_change() -> None:
    model = ComposerModel(micro_config())
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="cu_seqlens"):
        model(torch.zeros(1, 5, dtype=torch.long), cu_seqlens=torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="packed input"):
        model(torch.zeros(2, 5, dtype=torch.long), cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="one tensor per MoE layer"):
        model(
            torch.zeros(1, 5, dtype=torch.long),
            replay_indices=[torch.zeros(5, 2, dtype=torch.long)],
        )


def test_quantized_expert_precision_needs_the_kernel_or_says_so() -> None:
    try:
        from composer_kernels import quantized_grouped_mm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="quantized_grouped_mm"):
            ComposerModel(micro_config(expert_precision="nvfp4_mxfp8"))
        return
    model = ComposerModel(micro_config(expert_precision="nvfp4_mxfp8"))
    reference = ComposerModel(micro_config())
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(0, 128, (2, 16))
    out = model(ids).logits
    out.sum().backward()
    assert model.moe_layers[0].experts.w_gate_up.grad is not None
    with torch.no_grad():
        ref = reference(ids).logits
    rel = (out.detach() - ref).norm() / ref.norm()
    assert rel < 0.1  # NVFP4 forward: a few percent of error, not garbage


def test_bfloat16_training_step_tracks_float32() -> None:
    model = ComposerModel(micro_config())
    low = ComposerModel(micro_config()).to(torch.bfloat16)
    low.load_state_dict(model.state_dict())
    ids = torch.randint(0, 128, (2, 16))
    ref = model(ids).logits
    got = low(ids).logits
    assert got.dtype == torch.bfloat16
    assert (
        low.moe_layers[0].gate.e_score_correction_bias.dtype == torch.float32
    )  # bias stays precise
    assert ((got.float() - ref).norm() / ref.norm()) < 0.05
    got.float().logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in low.moe_layers[0].parameters())
