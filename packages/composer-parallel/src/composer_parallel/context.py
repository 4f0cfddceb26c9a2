"""Context parallelism for MLA over packed documents, applied from outside the model.

Layout (head-tail load balancing, per packed document): each document of length L is cut
into 2 x cp chunks (boundaries floor(j L / 2cp), so uneven lengths need no padding) and
rank r keeps chunks r and 2cp-1-r. Under a causal mask the early chunk is cheap and the
late one expensive, so every rank gets about the same attention work. No padding tokens
enter the model: the MoE load counts and the loss see exactly the single-process tokens.

Attention (`mode="allgather"`, the Composer report's choice for MLA): every rank computes
the compressed latents (c_kv and the shared rope key, `kv_lora_rank + rope_dim` numbers a
token, far fewer than per-head keys and values) of its own tokens, all-gathers them over
the cp group, and projects them to per-head keys and values locally. Its queries then
attend to their documents' prefixes. The backward of the all-gather is a reduce-scatter:
each rank's latent gradient is the sum of what every rank's queries sent back to it.

`mode="ring"` passes latent blocks around the cp ring instead (cp - 1 point-to-point
steps), attends to one block at a time and merges the partial outputs by their
log-sum-exp; it never holds the whole sequence's keys at once in the forward pass. Its
backward goes through autograd (the blocks are kept for it), so in training it trades the
all-gather's peak for the same saved activations; a recomputing backward is future work.

Per-document positions are global (a chunk's rotary phase is its place in its document),
which `ContextShard.positions` gives to the model.

`ContextParallel.layout(cu_seqlens)` is a cp rank's `composer_model.training.RowLayout`:
the one training step shards a row's inputs and targets through it, runs the forward
inside its `running()`, and gathers what looks ahead (self-distillation's teacher) with
it, so no loss handles context parallelism.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F

from composer_model.layers.attention import MultiHeadLatentAttention

CPMode = Literal["allgather", "ring"]
# Scores of masked pairs in the ring's partial attention: finite, so a query with nothing
# visible in a block gets a finite (and, after the merge, zero-weighted) partial result.
_MASKED = -1e30


def head_tail_spans(cu_seqlens: list[int], cp: int) -> list[list[tuple[int, int, int]]]:
    """Per cp rank, its (global_start, global_end, document_start) spans in local order.

    Document by document, rank r holds chunk r then chunk 2cp-1-r of the 2cp chunks with
    boundaries floor(j * L / 2cp). Empty chunks (documents shorter than 2cp) are dropped.
    """
    if cp < 1:
        raise ValueError(f"cp must be >= 1; got {cp}")
    if (
        not cu_seqlens
        or cu_seqlens[0] != 0
        or any(b < a for a, b in itertools.pairwise(cu_seqlens))
    ):
        raise ValueError(f"cu_seqlens must rise from 0; got {cu_seqlens}")
    chunks = 2 * cp
    spans: list[list[tuple[int, int, int]]] = [[] for _ in range(cp)]
    for start, end in itertools.pairwise(cu_seqlens):
        length = end - start
        bounds = [start + j * length // chunks for j in range(chunks + 1)]
        for r in range(cp):
            for j in (r, chunks - 1 - r):
                if bounds[j + 1] > bounds[j]:
                    spans[r].append((bounds[j], bounds[j + 1], start))
    return spans


@dataclass
class ContextShard:
    """What one cp rank needs to know about a packed sequence split head-tail."""

    cp: int
    rank: int
    total: int  # tokens in the whole packed sequence
    index: torch.Tensor  # [n_local] global token index of each local token
    positions: torch.Tensor  # [n_local] position inside its document
    doc_start: torch.Tensor  # [n_local] global index of its document's first token
    local_cu_seqlens: torch.Tensor  # chunk boundaries in the local stream
    spans: list[tuple[int, int, int]]  # this rank's (global_start, global_end, doc_start)
    counts: list[int]  # local token count of every cp rank
    all_index: list[torch.Tensor]  # every rank's `index`
    gather_source: torch.Tensor  # [total] row of the padded all-gather buffer per global token
    doc_of_token: torch.Tensor  # [total] global index of each token's document start

    @classmethod
    def build(cls, cu_seqlens: torch.Tensor | list[int], cp: int, rank: int) -> ContextShard:
        cu = [
            int(c)
            for c in (cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else cu_seqlens)
        ]
        if not 0 <= rank < cp:
            raise ValueError(f"cp rank {rank} is outside 0..{cp - 1}")
        every = head_tail_spans(cu, cp)
        all_index = [
            torch.cat([torch.arange(a, b) for a, b, _ in spans])
            if spans
            else torch.zeros(0, dtype=torch.long)
            for spans in every
        ]
        counts = [int(i.numel()) for i in all_index]
        width = max(counts) if counts else 0
        padded_row = torch.cat([torch.arange(n) + r * width for r, n in enumerate(counts)]).long()
        order = torch.cat(all_index)
        gather_source = torch.empty(cu[-1], dtype=torch.long)
        gather_source[order] = padded_row
        mine = every[rank]
        index = all_index[rank]
        doc_start = (
            torch.cat([torch.full((b - a,), s, dtype=torch.long) for a, b, s in mine])
            if mine
            else torch.zeros(0, dtype=torch.long)
        )
        local_cu = torch.tensor([0] + [b - a for a, b, _ in mine], dtype=torch.int32).cumsum(0)
        return cls(
            cp=cp,
            rank=rank,
            total=cu[-1],
            index=index,
            positions=index - doc_start,
            doc_start=doc_start,
            local_cu_seqlens=local_cu.to(torch.int32),
            spans=mine,
            counts=counts,
            all_index=all_index,
            gather_source=gather_source,
            doc_of_token=torch.repeat_interleave(
                torch.tensor(cu[:-1], dtype=torch.long), torch.tensor(cu).diff()
            ),
        )

    def shard(self, tensor: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """This rank's tokens of a tensor whose `dim` runs over the packed sequence."""
        if tensor.shape[dim] != self.total:
            raise ValueError(
                f"dimension {dim} has {tensor.shape[dim]} entries; the packed sequence has {self.total}"
            )
        return tensor.index_select(dim, self.index.to(tensor.device))


# --- collectives with their adjoints ----------------------------------------------------


class _AllGather(torch.autograd.Function):
    """[n, d] per rank (equal n) -> [cp * n, d]; backward reduce-scatters the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        size = dist.get_world_size(group)
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grads[0].contiguous()
        size = dist.get_world_size(ctx.group)
        out = grad.new_empty(grad.shape[0] // size, *grad.shape[1:])
        dist.reduce_scatter_tensor(out, grad, group=ctx.group)
        return out, None


def _ring_exchange(x: torch.Tensor, group: dist.ProcessGroup, forward: bool) -> torch.Tensor:
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    send_to = (rank + 1) % size if forward else (rank - 1) % size
    recv_from = (rank - 1) % size if forward else (rank + 1) % size
    out = torch.empty_like(x)
    ops = [
        dist.P2POp(dist.isend, x.contiguous(), dist.get_global_rank(group, send_to), group),
        dist.P2POp(dist.irecv, out, dist.get_global_rank(group, recv_from), group),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return out


class _RingPass(torch.autograd.Function):
    """Send a block to the next cp rank, receive the previous rank's; backward runs it back."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return _ring_exchange(x, group, forward=True)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _ring_exchange(grads[0], ctx.group, forward=False), None


def gather_sequence(
    local: torch.Tensor, shard: ContextShard, group: dist.ProcessGroup
) -> torch.Tensor:
    """All ranks' rows of `local` [n_local, d] assembled in global token order [total, d]."""
    width = max(shard.counts)
    padded = F.pad(local, (0, 0, 0, width - local.shape[0]))
    gathered = _AllGather.apply(padded, group)
    return gathered.index_select(0, shard.gather_source.to(local.device))


# --- attention kernels ------------------------------------------------------------------


def prefix_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shard: ContextShard, scale: float
) -> torch.Tensor:
    """Local queries [n, H, D] against the whole sequence's keys/values [T, H, D].

    Each local chunk attends to its document's prefix up to the chunk's last token, with
    the causal diagonal aligned to the bottom right (query i of nq sees key j of nk when
    j <= i + nk - nq).
    """
    if _flash_attn_applies(q):
        return _flash_prefix_attention(q, k, v, shard, scale)
    outs = []
    offset = 0
    for start, end, doc in shard.spans:
        nq, nk = end - start, end - doc
        qi = q[offset : offset + nq].transpose(0, 1)
        ki = k[doc:end].transpose(0, 1)
        vi = v[doc:end].transpose(0, 1)
        rows = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        mask = torch.arange(nk, device=q.device)[None, :] <= rows
        out = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=scale)
        outs.append(out.transpose(0, 1))
        offset += nq
    if not outs:
        return q.new_zeros(0, q.shape[1], v.shape[2])
    return torch.cat(outs)


def _flash_attn_applies(q: torch.Tensor) -> bool:
    return (
        q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and importlib.util.find_spec("flash_attn") is not None
    )


def _flash_prefix_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shard: ContextShard, scale: float
) -> torch.Tensor:  # pragma: no cover - needs CUDA and flash-attn; not run by the CPU tests
    """flash-attn varlen with per-chunk query spans and per-chunk key prefixes (bottom-right causal)."""
    from flash_attn import flash_attn_varlen_func

    key_rows = torch.cat([torch.arange(doc, end) for _, end, doc in shard.spans]).to(q.device)
    q_lens = [end - start for start, end, _ in shard.spans]
    k_lens = [end - doc for _, end, doc in shard.spans]
    cu_q = torch.tensor([0, *q_lens], device=q.device).cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0, *k_lens], device=q.device).cumsum(0).to(torch.int32)
    out: torch.Tensor = flash_attn_varlen_func(
        q,
        k[key_rows],
        v[key_rows],
        cu_q,
        cu_k,
        max(q_lens),
        max(k_lens),
        softmax_scale=scale,
        causal=True,
    )
    return out


def _masked_attention_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 attention of q [n, H, D] on k, v [m, H, D] under mask [n, m]; out and lse [H, n]."""
    scores = torch.einsum("nhd,mhd->hnm", q.float(), k.float()) * scale
    scores = scores.masked_fill(~mask[None], _MASKED)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("hnm,mhd->nhd", torch.exp(scores - lse[..., None]), v.float())
    return out, lse


# --- the module -------------------------------------------------------------------------


class ContextParallel:
    """The cp group, the mode, and the shard of the batch being run (set by `use`)."""

    def __init__(self, group: dist.ProcessGroup, mode: CPMode = "allgather") -> None:
        if mode not in ("allgather", "ring"):
            raise ValueError(f"context-parallel mode must be 'allgather' or 'ring'; got {mode!r}")
        self.group = group
        self.mode: CPMode = mode
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self._current: ContextShard | None = None

    def shard(self, cu_seqlens: torch.Tensor | list[int]) -> ContextShard:
        """This rank's shard of a packed sequence with global boundaries `cu_seqlens`."""
        return ContextShard.build(cu_seqlens, self.size, self.rank)

    @contextlib.contextmanager
    def use(self, shard: ContextShard) -> Iterator[ContextShard]:
        """Run the model on `shard`'s tokens inside this block (forward and backward)."""
        if shard.cp != self.size or shard.rank != self.rank:
            raise ValueError(
                f"the shard was built for cp={shard.cp} rank {shard.rank}, this group is "
                f"cp={self.size} rank {self.rank}"
            )
        previous, self._current = self._current, shard
        try:
            yield shard
        finally:
            self._current = previous

    def layout(self, cu_seqlens: torch.Tensor | list[int]) -> ContextLayout:
        """This rank's `RowLayout` of a packed row with global boundaries `cu_seqlens`."""
        return ContextLayout(self, self.shard(cu_seqlens))

    @property
    def current(self) -> ContextShard:
        if self._current is None:
            raise RuntimeError(
                "a context-parallel attention ran outside `ContextParallel.use(shard)`: shard the "
                "batch with cp.shard(cu_seqlens) and run the model inside `with cp.use(shard):`"
            )
        return self._current


@dataclass(frozen=True)
class ContextLayout:
    """A cp rank's head-tail shard of one packed row, as the training step sees it (a
    `composer_model.training.RowLayout`): dim 0 of every per-token tensor runs over the
    row's tokens, and the forward runs inside `running()`."""

    context: ContextParallel
    shard: ContextShard

    @property
    def cu_seqlens(self) -> torch.Tensor:
        return self.shard.local_cu_seqlens

    def local(self, row: torch.Tensor) -> torch.Tensor:
        return self.shard.shard(row, dim=0)

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        flat = local.reshape(local.shape[0], -1)
        whole = gather_sequence(flat, self.shard, self.context.group)
        return whole.reshape(whole.shape[0], *local.shape[1:])

    def running(self) -> contextlib.AbstractContextManager[object]:
        return self.context.use(self.shard)


class ContextParallelMLA(MultiHeadLatentAttention):
    """MLA whose packed forward attends across the cp group; the cached path is unchanged.

    Made by `apply_context_parallel` swapping the class of existing modules, so parameter
    names and checkpoints stay those of `MultiHeadLatentAttention`.
    """

    context: ContextParallel

    def _project(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c_kv, k_rope = latent.split([self.kv_rank, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(c_kv).view(latent.shape[0], self.num_heads, self.nope_dim + self.v_dim)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(-1, self.num_heads, -1)], dim=-1)
        return k, v

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> torch.Tensor:
        """x [n_local, hidden]: this rank's tokens of `context.current` (cu_seqlens unused)."""
        ctx = self.context
        shard = ctx.current
        if x.shape[0] != shard.index.numel():
            raise ValueError(
                f"the attention got {x.shape[0]} tokens but the active shard holds {shard.index.numel()}"
            )
        q_nope, q_rope = self._queries(x, cos, sin)
        q = torch.cat([q_nope, q_rope], dim=-1)
        latent = self.latents(x, cos, sin)
        if ctx.mode == "allgather":
            k, v = self._project(gather_sequence(latent, shard, ctx.group))
            out = prefix_attention(q, k, v, shard, self.scale).to(x.dtype)
        else:
            out = self._ring(q, latent, shard)
        return self.o_proj(out.reshape(x.shape[0], self.num_heads * self.v_dim))

    def _ring(self, q: torch.Tensor, latent: torch.Tensor, shard: ContextShard) -> torch.Tensor:
        ctx = self.context
        device = q.device
        width = max(shard.counts)
        block = F.pad(latent, (0, 0, 0, width - latent.shape[0]))
        q_index = shard.index.to(device)
        q_doc = shard.doc_start.to(device)
        doc_of = shard.doc_of_token.to(device)
        outs, lses = [], []
        for step in range(ctx.size):
            if step:
                block = _RingPass.apply(block, ctx.group)
            source = (ctx.rank - step) % ctx.size
            n = shard.counts[source]
            if n == 0:
                continue
            k_index = shard.all_index[source].to(device)
            mask = (q_doc[:, None] == doc_of[k_index][None, :]) & (
                k_index[None, :] <= q_index[:, None]
            )
            if not bool(mask.any()):
                continue
            k, v = self._project(block[:n])
            out, lse = _masked_attention_lse(q, k, v, mask, self.scale)
            outs.append(out)
            lses.append(lse)
        if not outs:
            return q.new_zeros(q.shape[0], self.num_heads, self.v_dim)
        stacked = torch.stack(lses)  # [S, H, n]
        total = torch.logsumexp(stacked, dim=0)
        weights = torch.exp(stacked - total).permute(0, 2, 1).unsqueeze(-1)  # [S, n, H, 1]
        merged = (torch.stack(outs) * weights).sum(0)
        return merged.to(q.dtype)


def apply_context_parallel(
    model: torch.nn.Module,
    group: dist.ProcessGroup,
    mode: CPMode = "allgather",
    *,
    context: ContextParallel | None = None,
) -> ContextParallel:
    """Make every MLA module of `model` context-parallel over `group`; returns the handle
    whose `layout` (or `shard`/`use`) the training step uses around each forward.

    `context` (a handle over the same group) makes `model` share it: a second model, such
    as RL's frozen reference, then runs on the same shard inside the same `running()`."""
    kind = getattr(getattr(model, "config", None), "attention", "mla")
    if kind != "mla":
        raise ValueError(
            f"context parallelism shards MLA's latents; this model has attention={kind!r} "
            "(use attention='mla', or cp = 1)"
        )
    if context is None:
        context = ContextParallel(group, mode)
    elif context.group is not group:
        raise ValueError("the shared context-parallel handle is over another process group")
    for module in model.modules():
        if isinstance(module, MultiHeadLatentAttention):
            module.__class__ = ContextParallelMLA
            assert isinstance(module, ContextParallelMLA)
            module.context = context
    return context


__all__ = [
    "CPMode",
    "ContextLayout",
    "ContextParallel",
    "ContextParallelMLA",
    "ContextShard",
    "apply_context_parallel",
    "gather_sequence",
    "head_tail_spans",
    "prefix_attention",
]
