"""Data parallelism: gradients summed over the right group for each parameter.

Dense parameters (attention, dense FFNs, router, shared experts, embeddings, head) are
replicated on all dp x cp ranks: each rank's gradient covers only its own tokens, so the
gradient of the global loss is their sum over the world. Expert weights are sharded over
ep; the all-to-all already brought every token of the ep group to them, so they are
summed over the expert-dp group only (the ranks holding the same shard).

This is DDP's all-reduce with per-parameter groups (DDP itself reduces everything over
one group, which would sum different experts' gradients under EP). The losses here are
normalised by the *global* number of targets, so the collective is a plain SUM.

FSDP2 (`torch.distributed.fsdp.fully_shard`) does run on CPU with gloo in torch 2.15 (a
two-process probe sharded, ran forward/backward and reduce-scattered; gloo has
`reduce_scatter_tensor` there). It is not wired yet: under EP it needs two meshes (dense
over dp x cp, experts over expert-dp, as torchtitan does), a gradient divide factor of 1
for our globally normalised loss, and a grad norm across both meshes. Until then this
module is the data-parallel path: replicated dense weights, ep-sharded experts.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from composer_parallel.expert import is_expert_parameter


def _split(model: torch.nn.Module) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    dense: list[torch.nn.Parameter] = []
    experts: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (experts if is_expert_parameter(name) else dense).append(param)
    return dense, experts


def _all_reduce_grads(params: list[torch.nn.Parameter], group: dist.ProcessGroup) -> None:
    if not params or dist.get_world_size(group) == 1:
        return
    missing = [p.grad is None for p in params]
    for p in params:
        if p.grad is None:  # unused on this rank: still take part in the collective
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params if p.grad is not None]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    for grad, reduced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(reduced)
    for p, was_missing in zip(params, missing, strict=True):
        # Unused on every rank (e.g. the MTP module before it joins): leave no gradient, as
        # a single process would, so the optimizer skips it (no weight decay on it either).
        if was_missing and p.grad is not None and not bool(p.grad.any()):
            p.grad = None


def sync_gradients(
    model: torch.nn.Module,
    world: dist.ProcessGroup,
    expert_dp: dist.ProcessGroup | None,
) -> None:
    """Sum dense gradients over `world` and expert gradients over `expert_dp` (in place)."""
    dense, experts = _split(model)
    _all_reduce_grads(dense, world)
    if experts:
        if expert_dp is None:
            _all_reduce_grads(experts, world)  # experts not sharded: plain data parallelism
        else:
            _all_reduce_grads(experts, expert_dp)


def grad_norm(model: torch.nn.Module, ep: dist.ProcessGroup | None) -> torch.Tensor:
    """Global L2 norm of the (already synchronised) gradients, experts counted once."""
    dense, experts = _split(model)
    square = torch.zeros((), dtype=torch.float64)
    for p in dense:
        if p.grad is not None:
            square += p.grad.detach().double().pow(2).sum().cpu()
    expert_square = torch.zeros((), dtype=torch.float64)
    for p in experts:
        if p.grad is not None:
            expert_square += p.grad.detach().double().pow(2).sum().cpu()
    if ep is not None and dist.get_world_size(ep) > 1:
        dist.all_reduce(expert_square, group=ep)
    return (square + expert_square).sqrt()


def clip_gradients(
    model: torch.nn.Module, max_norm: float | None, ep: dist.ProcessGroup | None
) -> float:
    """Scale all gradients so the global norm is at most `max_norm`; returns the norm before."""
    norm = float(grad_norm(model, ep))
    if max_norm is not None and math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)
    return norm


__all__ = ["clip_gradients", "grad_norm", "sync_gradients"]
