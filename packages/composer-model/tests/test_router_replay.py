"""Router replay: reproduce logits, keep router gradient, pin routing across a weight change."""

from __future__ import annotations

import torch
from conftest import micro_config

from composer_model import ComposerModel


def _model() -> ComposerModel:
    model = ComposerModel(micro_config())
    with torch.no_grad():
        for layer in model.moe_layers:
            layer.gate.weight.normal_(0, 0.5)  # decisive routing
    return model


def test_replaying_own_routing_reproduces_logits_exactly() -> None:
    model = _model().eval()
    ids = torch.randint(0, 128, (2, 20))
    with torch.no_grad():
        first = model(ids, return_routing=True)
        assert first.routing is not None and len(first.routing) == 2
        assert first.routing[0].shape == (40, 2)
        replayed = model(ids, replay_indices=first.routing)
    assert torch.equal(replayed.logits, first.logits)


def test_router_gets_gradient_under_replay() -> None:
    model = _model().train()
    ids = torch.randint(0, 128, (2, 20))
    with torch.no_grad():
        routing = model(ids, return_routing=True).routing
    assert routing is not None
    out = model(ids, replay_indices=routing)
    out.logits.logsumexp(-1).mean().backward()
    for layer in model.moe_layers:
        assert layer.gate.weight.grad is not None
        assert layer.gate.weight.grad.abs().sum() > 0


def test_perturbed_model_with_replay_keeps_the_original_routing() -> None:
    model = _model().eval()
    ids = torch.randint(0, 128, (2, 20))
    with torch.no_grad():
        original = model(ids, return_routing=True).routing
        assert original is not None
        for layer in model.moe_layers:
            layer.gate.weight.add_(torch.randn_like(layer.gate.weight))
        drifted = model(ids, return_routing=True).routing
        replayed = model(ids, replay_indices=original, return_routing=True).routing
    assert drifted is not None and replayed is not None
    assert any(
        not torch.equal(a, b) for a, b in zip(drifted, original, strict=True)
    )  # perturbation matters
    for got, want in zip(replayed, original, strict=True):
        assert torch.equal(got, want)


def test_plausibility_guard_swaps_only_implausible_experts() -> None:
    model = _model().eval()
    ids = torch.randint(0, 128, (1, 30))
    with torch.no_grad():
        own = model(ids, return_routing=True).routing
        assert own is not None
        # Same routing: nothing to replace.
        same = model(ids, replay_indices=own, replay_guard=0.5)
        assert int(same.replacements) == 0
        # Replay experts shifted away from the router's choice: implausible ones must be swapped.
        shifted = [(layer_routing + 4) % 8 for layer_routing in own]
        guarded = model(ids, replay_indices=shifted, replay_guard=1.0, return_routing=True)
    assert int(guarded.replacements) > 0
    assert guarded.routing is not None
    for got, mine, replay in zip(guarded.routing, own, shifted, strict=True):
        assert (got[:, 0] != got[:, 1]).all()  # still distinct experts
        kept = got == replay
        from_own = (got[:, :, None] == mine[:, None, :]).any(-1)
        assert (kept | from_own).all()  # every swap comes from the router's own choice
