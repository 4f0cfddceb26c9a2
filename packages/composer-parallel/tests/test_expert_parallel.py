"""Expert-parallel MoE equals the single-process layer: outputs, gradients, replay, load."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from composer_kernels import fake_quantize_for_dispatch
from composer_model import preset
from composer_model.layers.moe import MoE
from composer_parallel.expert import (
    AllToAllDispatcher,
    ExpertParallelExperts,
    apply_expert_parallel,
    is_expert_parameter,
    load_all_reduce,
)
from composer_parallel.launch import run_local

TOKENS = 37  # not a multiple of the group sizes: ranks hold different token counts


def _problem() -> tuple[MoE, torch.Tensor, torch.Tensor, torch.Tensor]:
    config = preset(
        "tiny",
        hidden_size=64,
        moe_intermediate_size=24,
        n_routed_experts=8,
        n_group=4,
        topk_group=2,
        num_experts_per_tok=3,
    )
    torch.manual_seed(0)
    moe = MoE(config)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.3)
    moe.gate.e_score_correction_bias.normal_(std=0.05)
    x = torch.randn(TOKENS, config.hidden_size)
    probe = torch.randn(TOKENS, config.hidden_size)
    replay = torch.stack([torch.randperm(8)[:3] for _ in range(TOKENS)])
    return moe, x, probe, replay


def _reference(replay: bool, quantize: bool) -> dict[str, Any]:
    moe, x, probe, indices = _problem()
    moe.train()
    x = x.clone().requires_grad_(True)
    routing = moe.gate(x, indices if replay else None)
    expert_in = fake_quantize_for_dispatch(x) if quantize else x
    assert moe.shared_experts is not None
    out = moe.experts(expert_in, routing) + moe.shared_experts(x)
    (out * probe).sum().backward()
    return {
        "out": out.detach(),
        "x_grad": x.grad,
        "grads": {n: p.grad.clone() for n, p in moe.named_parameters() if p.grad is not None},
        "load": moe.gate.tokens_per_expert.clone(),
    }


def _ep_run(group: dist.ProcessGroup, replay: bool, quantize: bool) -> dict[str, Any]:
    moe, x, probe, indices = _problem()
    moe.train()
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    (experts,) = apply_expert_parallel(moe, group, quantize="mxfp8" if quantize else "none")
    assert isinstance(experts, ExpertParallelExperts)
    rows = torch.arange(TOKENS).chunk(size)[rank]
    local_x = x[rows].clone().requires_grad_(True)
    out, _ = moe(local_x, indices[rows] if replay else None)
    (out * probe[rows]).sum().backward()
    grads = {}
    for name, p in moe.named_parameters():
        assert p.grad is not None
        if not is_expert_parameter(name):  # replicated: sum the data-parallel contributions
            dist.all_reduce(p.grad, group=group)
        grads[name] = p.grad
    load = load_all_reduce(group)(moe.gate.tokens_per_expert)
    return {
        "rows": rows,
        "out": out.detach(),
        "x_grad": local_x.grad,
        "grads": grads,
        "first": experts.first_expert,
        "local": experts.w_gate_up.shape[0],
        "load": load,
    }


CASES = [(4, False, False), (2, False, False), (4, True, False), (2, False, True), (4, True, True)]


def _ep_rank(rank: int, world: int) -> dict[tuple[int, bool, bool], dict[str, Any]]:
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    out = {}
    for ep, replay, quantize in CASES:
        group = dist.group.WORLD if ep == 4 else pairs[rank // 2]
        assert group is not None
        out[(ep, replay, quantize)] = _ep_run(group, replay, quantize)
    return out


def test_expert_parallel_moe_matches_single_process() -> None:
    """ep 2 and 4; own routing and replayed routing; bf16-style and MXFP8 dispatch."""
    by_rank = run_local(_ep_rank, 4)
    for ep, replay, quantize in CASES:
        ref = _reference(replay, quantize)
        case = f"ep={ep} replay={replay} mxfp8={quantize}"
        for r in range(ep):
            got = by_rank[r][(ep, replay, quantize)]
            torch.testing.assert_close(
                got["out"], ref["out"][got["rows"]], atol=1e-5, rtol=1e-5, msg=case
            )
            torch.testing.assert_close(
                got["x_grad"], ref["x_grad"][got["rows"]], atol=1e-5, rtol=1e-5, msg=case
            )
            torch.testing.assert_close(got["load"], ref["load"], msg=case)
            for name, grad in ref["grads"].items():
                if is_expert_parameter(name):
                    grad = grad[got["first"] : got["first"] + got["local"]]
                torch.testing.assert_close(
                    got["grads"][name], grad, atol=1e-5, rtol=1e-5, msg=f"{case} {name}"
                )


def test_expert_parameters_are_recognised_by_name() -> None:
    assert is_expert_parameter("experts.w_gate_up")
    assert is_expert_parameter("layers.2.mlp.experts.w_down")
    assert not is_expert_parameter("layers.2.mlp.shared_experts.gate_proj.weight")
    assert not is_expert_parameter("layers.2.mlp.gate.weight")


def test_dispatcher_refuses_unknown_quantization() -> None:
    with pytest.raises(ValueError, match="quantize must be"):
        AllToAllDispatcher(None, 8, quantize="fp4")  # type: ignore[arg-type]
