"""Context-parallel MLA equals single-process MLA: outputs and gradients, cp 2 and 4."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from composer_model import preset
from composer_model.layers.attention import MultiHeadLatentAttention
from composer_model.layers.rope import RotaryEmbedding
from composer_model.model import positions_from_cu_seqlens
from composer_parallel.context import ContextShard, apply_context_parallel, head_tail_spans
from composer_parallel.launch import run_local

LENGTHS = [7, 13, 3, 21, 1, 10]  # uneven, one shorter than 2 x cp, one of length 1


def _config() -> Any:
    return preset(
        "tiny",
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
    )


def _problem() -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    config = _config()
    torch.manual_seed(0)
    attn = MultiHeadLatentAttention(config, 0)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.2)
    cu = torch.tensor([0, *LENGTHS]).cumsum(0).to(torch.int32)
    total = int(cu[-1])
    x = torch.randn(total, config.hidden_size)
    probe = torch.randn(total, config.hidden_size)
    positions = positions_from_cu_seqlens(cu, total)
    return attn, cu, x, probe, positions, torch.zeros(0)


def _reference() -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    attn, cu, x, probe, positions, _ = _problem()
    cos, sin = RotaryEmbedding(_config())(positions)
    x = x.clone().requires_grad_(True)
    out = attn(x, cos, sin, cu)
    (out * probe).sum().backward()
    assert x.grad is not None
    return (
        out.detach(),
        x.grad,
        {n: p.grad.clone() for n, p in attn.named_parameters() if p.grad is not None},
    )


def _cp_run(group: dist.ProcessGroup, mode: str) -> dict[str, Any]:
    attn, cu, x, probe, _, _ = _problem()
    cp = apply_context_parallel(attn, group, mode=mode)  # type: ignore[arg-type]
    shard = cp.shard(cu)
    cos, sin = RotaryEmbedding(_config())(shard.positions)
    local_x = shard.shard(x, 0).clone().requires_grad_(True)
    with cp.use(shard):
        out = attn(local_x, cos, sin, shard.local_cu_seqlens)
        (out * shard.shard(probe, 0)).sum().backward()
    grads = {}
    for name, p in attn.named_parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad, group=group)  # the data-parallel sum the trainer does over dp x cp
        grads[name] = p.grad
    return {"index": shard.index, "out": out.detach(), "x_grad": local_x.grad, "grads": grads}


def _cp_rank(rank: int, world: int) -> dict[tuple[int, str], dict[str, Any]]:
    """On 4 processes: cp=4 over the world, and cp=2 over {0,1} and {2,3}; both modes."""
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    results = {}
    for mode in ("allgather", "ring"):
        results[(4, mode)] = _cp_run(dist.group.WORLD, mode)  # type: ignore[arg-type]
        results[(2, mode)] = _cp_run(pairs[rank // 2], mode)
    return results


def test_context_parallel_mla_matches_single_process() -> None:
    """Outputs, input gradients and parameter gradients for cp 2 and 4, all-gather and ring."""
    ref_out, ref_xgrad, ref_grads = _reference()
    by_rank = run_local(_cp_rank, 4)
    for cp, mode in [(2, "allgather"), (2, "ring"), (4, "allgather"), (4, "ring")]:
        results = [by_rank[r][(cp, mode)] for r in range(cp)]
        seen = torch.cat([r["index"] for r in results])
        assert sorted(seen.tolist()) == list(range(sum(LENGTHS))), (cp, mode)
        for r in results:
            torch.testing.assert_close(r["out"], ref_out[r["index"]], atol=2e-5, rtol=1e-4)
            torch.testing.assert_close(r["x_grad"], ref_xgrad[r["index"]], atol=2e-5, rtol=1e-4)
        for name, grad in ref_grads.items():
            torch.testing.assert_close(
                results[0]["grads"][name], grad, atol=5e-5, rtol=1e-4, msg=f"{cp} {mode} {name}"
            )


def test_head_tail_layout_on_paper() -> None:
    # One document of 16 tokens, cp=2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    spans = head_tail_spans([0, 16], 2)
    assert spans == [[(0, 4, 0), (12, 16, 0)], [(4, 8, 0), (8, 12, 0)]]
    # Causal work per rank (sum over its queries of visible keys) is balanced exactly here.
    work = [sum(sum(range(a - d + 1, b - d + 1)) for a, b, d in s) for s in spans]
    assert work[0] == work[1]
    # Uneven document: 10 tokens, cp=2 -> boundaries 0,2,5,7,10.
    assert head_tail_spans([0, 10], 2) == [[(0, 2, 0), (7, 10, 0)], [(2, 5, 0), (5, 7, 0)]]


def test_shard_positions_restart_per_document() -> None:
    shard = ContextShard.build([0, 6, 10], cp=2, rank=1)
    # doc 0 (6 tokens): boundaries 0,1,3,4,6 -> rank 1 chunks [1,3) and [3,4); doc 1 (4): [7,8),[8,9)
    assert shard.index.tolist() == [1, 2, 3, 7, 8]
    assert shard.positions.tolist() == [1, 2, 3, 1, 2]
    assert shard.local_cu_seqlens.tolist() == [0, 2, 3, 4, 5]


def test_bad_layout_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="cp must be"):
        head_tail_spans([0, 4], 0)
    with pytest.raises(ValueError, match="rise from 0"):
        head_tail_spans([1, 4], 2)
    with pytest.raises(ValueError, match="outside"):
        ContextShard.build([0, 4], cp=2, rank=2)


def test_a_model_without_mla_is_refused_not_left_unsharded() -> None:
    """Context parallelism swaps MLA modules; a model of plain attention (`attention="mha"`)
    has none, and would otherwise run every rank on its shard alone, unseen by the others."""
    from composer_model import ComposerModel

    model = ComposerModel(preset("tiny", attention="mha", qk_rope_head_dim=32))
    with pytest.raises(ValueError, match="attention='mla', or cp = 1"):
        apply_context_parallel(model, None)  # type: ignore[arg-type]
