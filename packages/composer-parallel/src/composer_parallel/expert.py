"""Expert parallelism: each rank of the ep group owns E / ep routed experts.

Applied from outside the model: `apply_expert_parallel` keeps each MoE layer's router,
shared expert and Python code, slices the stacked expert weights to this rank's experts
and swaps `RoutedExperts` for `ExpertParallelExperts`, whose forward is

    route (unchanged, replicated router) -> dispatch -> local grouped GEMMs -> combine.

Because the router is untouched, router replay (the inference engine's expert indices,
with or without the plausibility guard) works as in one process: replayed indices are
global expert ids. The balancing bias needs the load summed over every rank that routed
tokens (dp x cp), which `load_all_reduce` gives to `ComposerModel.update_balancing_bias`.

Dispatchers (the `Dispatcher` protocol):

- `AllToAllDispatcher`: `torch.distributed` all-to-all, runs everywhere (gloo on CPU,
  NCCL on GPUs). Counts first (how many rows each rank sends each of its peers' experts),
  then the token rows, then a local permutation to expert-major order for the grouped
  GEMM; the combine runs the same steps backwards and sums each token's top-k expert
  outputs in fp32 in slot order, which is deterministic (no scatter-add). With
  `quantize="mxfp8"` the rows travel as MXFP8 codes plus E8M0 scales (composer-kernels'
  dispatch format, about half the bytes of bf16); their gradient comes back unquantized.
- `DeepEPDispatcher`: DeepEP's `Buffer` (NVLink/RDMA kernels) when `deep_ep` imports on
  CUDA. It is written against DeepEP's documented normal-mode API and has not been run
  here (no GPU, DeepEP is built from source); `make_dispatcher` only picks it on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
import torch.distributed as dist
import torch.nn.functional as F

from composer_kernels import dispatch_dequantize, dispatch_quantize
from composer_model.layers.moe import RoutedExperts, Routing
from composer_parallel.backends import ExpertDispatchBackend, expert_dispatch_backend

Quantize = Literal["none", "mxfp8"]


@dataclass
class Dispatched:
    """Rows for this rank's experts, expert-major, and what the combine needs to undo it."""

    tokens: torch.Tensor  # [M, hidden] rows of local expert 0, then 1, ...
    offsets: torch.Tensor  # [E_local] end row of each local expert (grouped-GEMM layout)
    weights: torch.Tensor | None  # [M] gate value per row when the backend combines unweighted
    handle: Any


class Dispatcher(Protocol):
    """Moves (token, slot) rows to the ranks owning their experts and the results back."""

    def dispatch(self, x: torch.Tensor, routing: Routing) -> Dispatched: ...

    def combine(self, y: torch.Tensor, routing: Routing, dispatched: Dispatched) -> torch.Tensor:
        """Expert outputs [M, hidden] (same rows as `dispatched.tokens`) -> [N, hidden]."""
        ...


# --- differentiable all-to-all ----------------------------------------------------------


def _all_to_all(
    x: torch.Tensor, send: list[int], recv: list[int], group: dist.ProcessGroup
) -> torch.Tensor:
    out = x.new_empty(sum(recv), *x.shape[1:])
    dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, send: list[int], recv: list[int], group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        return _all_to_all(x, send, recv, group)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _all_to_all(grads[0], ctx.recv, ctx.send, ctx.group), None, None, None


class _AllToAllMXFP8(torch.autograd.Function):
    """Forward: rows cross as MXFP8 (uint8 codes + E8M0 scales); backward: plain gradient."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, send: list[int], recv: list[int], group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        data, scales = dispatch_quantize(x)
        data = _all_to_all(data, send, recv, group)
        scales = _all_to_all(scales, send, recv, group)
        return dispatch_dequantize(data, scales, x.dtype)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _all_to_all(grads[0], ctx.recv, ctx.send, ctx.group), None, None, None


class AllToAllDispatcher:
    """Token dispatch/combine over `torch.distributed.all_to_all_single` on the ep group."""

    def __init__(
        self, group: dist.ProcessGroup, num_experts: int, quantize: Quantize = "none"
    ) -> None:
        if quantize not in ("none", "mxfp8"):
            raise ValueError(f"quantize must be 'none' or 'mxfp8'; got {quantize!r}")
        self.group = group
        self.size = dist.get_world_size(group)
        if num_experts % self.size:
            raise ValueError(f"{num_experts} experts do not split over an ep group of {self.size}")
        self.num_experts = num_experts
        self.local = num_experts // self.size
        self.quantize: Quantize = quantize

    def dispatch(self, x: torch.Tensor, routing: Routing) -> Dispatched:
        top_k = routing.indices.shape[1]
        flat = routing.indices.flatten()
        order = torch.argsort(flat, stable=True)  # expert-major, hence grouped by owner rank
        counts = torch.bincount(flat, minlength=self.num_experts).view(self.size, self.local)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts.contiguous(), group=self.group)
        send = counts.sum(1).tolist()
        recv = recv_counts.sum(1).tolist()
        rows = x[order // top_k]
        move = _AllToAllMXFP8 if self.quantize == "mxfp8" else _AllToAll
        received = move.apply(rows, send, recv, self.group)  # [M] ordered (source, expert)
        expert_of_row = torch.repeat_interleave(
            torch.arange(self.local, device=x.device).repeat(self.size),
            recv_counts.flatten().to(x.device),
        )
        to_expert_major = torch.argsort(expert_of_row, stable=True)
        offsets = recv_counts.sum(0).cumsum(0)
        return Dispatched(
            tokens=received[to_expert_major],
            offsets=offsets,
            weights=None,
            handle=(order, to_expert_major, send, recv),
        )

    def combine(self, y: torch.Tensor, routing: Routing, dispatched: Dispatched) -> torch.Tensor:
        order, to_expert_major, send, recv = dispatched.handle
        by_source = y[torch.argsort(to_expert_major)]
        returned = _AllToAll.apply(by_source, recv, send, self.group)  # in `order` order
        per_slot = returned[torch.argsort(order)]  # [N * top_k] in (token, slot) order
        n, top_k = routing.indices.shape
        weighted = per_slot.view(n, top_k, -1).float() * routing.weights.float().unsqueeze(-1)
        return weighted.sum(1)  # fp32; the caller casts


class DeepEPDispatcher:  # pragma: no cover - needs CUDA and a DeepEP build; not run by the tests
    """DeepEP normal-mode dispatch/combine (intranode NVLink, internode RDMA).

    DeepEP sends each token once to each rank holding any of its experts; the receiving
    rank computes its experts for it and sums them with their gate values, and the
    combine sums the per-rank partial outputs. Untested in this repository.
    """

    def __init__(self, group: dist.ProcessGroup, num_experts: int, hidden_bytes: int) -> None:
        import deep_ep

        self.group = group
        self.num_experts = num_experts
        self.size = dist.get_world_size(group)
        self.local = num_experts // self.size
        num_nvl_bytes = num_rdma_bytes = 0
        for config in (
            deep_ep.Buffer.get_dispatch_config(self.size),
            deep_ep.Buffer.get_combine_config(self.size),
        ):
            num_nvl_bytes = max(
                config.get_nvl_buffer_size_hint(hidden_bytes, self.size), num_nvl_bytes
            )
            num_rdma_bytes = max(
                config.get_rdma_buffer_size_hint(hidden_bytes, self.size), num_rdma_bytes
            )
        self.buffer = deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes)

    def dispatch(self, x: torch.Tensor, routing: Routing) -> Dispatched:
        recv_x, recv_idx, recv_weights, handle = _DeepEPDispatch.apply(
            x, routing.indices, routing.weights.float(), self
        )
        valid = recv_idx >= 0
        token, slot = valid.nonzero(as_tuple=True)
        expert = recv_idx[token, slot]
        order = torch.argsort(expert, stable=True)
        counts = torch.bincount(expert, minlength=self.local)
        return Dispatched(
            tokens=recv_x[token[order]],
            offsets=counts.cumsum(0),
            weights=recv_weights[token[order], slot[order]],
            handle=(handle, token[order], recv_x.shape[0]),
        )

    def combine(self, y: torch.Tensor, routing: Routing, dispatched: Dispatched) -> torch.Tensor:
        handle, token, n_recv = dispatched.handle
        assert dispatched.weights is not None
        partial = torch.zeros(n_recv, y.shape[1], dtype=torch.float32, device=y.device)
        partial = partial.index_add(0, token, y.float() * dispatched.weights.unsqueeze(-1))
        out: torch.Tensor = _DeepEPCombine.apply(partial.to(torch.bfloat16), handle, self)
        return out.float()


class _DeepEPDispatch(torch.autograd.Function):  # pragma: no cover - CUDA + DeepEP only
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor, d: DeepEPDispatcher
    ) -> Any:
        per_rank, per_rdma, per_expert, in_rank, _ = d.buffer.get_dispatch_layout(
            idx, d.num_experts
        )
        recv_x, recv_idx, recv_w, _, handle, _ = d.buffer.dispatch(
            x,
            topk_idx=idx,
            topk_weights=weights,
            num_tokens_per_rank=per_rank,
            num_tokens_per_rdma_rank=per_rdma,
            is_token_in_rank=in_rank,
            num_tokens_per_expert=per_expert,
        )
        ctx.d, ctx.handle = d, handle
        ctx.mark_non_differentiable(recv_idx)
        return recv_x, recv_idx, recv_w, handle

    @staticmethod
    def backward(ctx: Any, grad_x: torch.Tensor, _i: Any, grad_w: torch.Tensor, _h: Any) -> Any:
        grad, grad_weights, _ = ctx.d.buffer.combine(grad_x, ctx.handle, topk_weights=grad_w)
        return grad, None, grad_weights, None


class _DeepEPCombine(torch.autograd.Function):  # pragma: no cover - CUDA + DeepEP only
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, handle: Any, d: DeepEPDispatcher) -> torch.Tensor:
        ctx.d, ctx.handle = d, handle
        out, _, _ = d.buffer.combine(x, handle)
        return out  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        grad, *_ = ctx.d.buffer.dispatch(grads[0], handle=ctx.handle)
        return grad, None, None


def make_dispatcher(
    group: dist.ProcessGroup,
    num_experts: int,
    hidden_size: int,
    device: torch.device,
    backend: ExpertDispatchBackend | None = None,
    quantize: Quantize = "none",
) -> Dispatcher:
    """DeepEP on CUDA when installed (or asked for), all-to-all otherwise."""
    chosen = expert_dispatch_backend(backend)
    if chosen == "deep_ep" and device.type == "cuda":
        if quantize != "none":
            raise ValueError(
                "MXFP8 dispatch is wired for the all-to-all backend only; DeepEP's FP8 path uses "
                "its own per-128 float scales. Use quantize='none' with deep_ep"
            )
        return DeepEPDispatcher(group, num_experts, hidden_size * 2)
    if chosen == "deep_ep" and backend == "deep_ep":
        raise RuntimeError(f"DeepEP needs CUDA tensors; this model is on {device}")
    return AllToAllDispatcher(group, num_experts, quantize)


# --- the module -------------------------------------------------------------------------


class ExpertParallelExperts(RoutedExperts):
    """`RoutedExperts` holding only this rank's experts; made by `apply_expert_parallel`."""

    dispatcher: Dispatcher
    first_expert: int

    def forward(self, x: torch.Tensor, routing: Routing) -> torch.Tensor:
        sent = self.dispatcher.dispatch(x, routing)
        gate_up = self._mm(sent.tokens, self.w_gate_up, sent.offsets)
        gate, up = gate_up.split(self.intermediate, dim=-1)
        down = self._mm(F.silu(gate) * up, self.w_down, sent.offsets)
        return self.dispatcher.combine(down, routing, sent).to(x.dtype)


def apply_expert_parallel(
    model: torch.nn.Module,
    group: dist.ProcessGroup,
    backend: ExpertDispatchBackend | None = None,
    quantize: Quantize = "none",
) -> list[ExpertParallelExperts]:
    """Shard every `RoutedExperts` of `model` over `group` (call before building the optimizer).

    Rank i of the group keeps experts [i * E/ep, (i+1) * E/ep) of the full weights, so a
    model built with the same seed everywhere (or loaded from one checkpoint) shards
    consistently; `gather_experts` undoes it for saving.
    """
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    swapped = []
    for module in model.modules():
        if not isinstance(module, RoutedExperts):
            continue
        if module.num_experts % size:
            raise ValueError(
                f"{module.num_experts} routed experts do not split over ep={size}; pick ep dividing "
                "n_routed_experts"
            )
        local = module.num_experts // size
        first = rank * local
        dispatcher = make_dispatcher(
            group,
            module.num_experts,
            module.w_gate_up.shape[1],
            module.w_gate_up.device,
            backend,
            quantize,
        )
        module.w_gate_up = torch.nn.Parameter(
            module.w_gate_up.detach()[first : first + local].clone()
        )
        module.w_down = torch.nn.Parameter(module.w_down.detach()[first : first + local].clone())
        module.__class__ = ExpertParallelExperts
        assert isinstance(module, ExpertParallelExperts)
        module.dispatcher = dispatcher
        module.first_expert = first
        swapped.append(module)
    return swapped


def is_expert_parameter(name: str) -> bool:
    """Parameters sharded by expert parallelism (gradients summed over expert-dp only)."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[-2] == "experts" and parts[-1].startswith("w_")


def load_all_reduce(
    group: dist.ProcessGroup | None = None,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The `reduce` for `update_balancing_bias`: per-expert token counts summed over `group`
    (every rank that routed tokens: the whole dp x cp world)."""

    def reduce(loads: torch.Tensor) -> torch.Tensor:
        total = loads.clone()
        dist.all_reduce(total, group=group)
        return total

    return reduce


__all__ = [
    "AllToAllDispatcher",
    "DeepEPDispatcher",
    "Dispatched",
    "Dispatcher",
    "ExpertParallelExperts",
    "Quantize",
    "apply_expert_parallel",
    "is_expert_parameter",
    "load_all_reduce",
    "make_dispatcher",
]
