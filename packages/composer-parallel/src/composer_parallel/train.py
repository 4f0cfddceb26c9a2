"""Training under dp x cp x ep: parallelize a plain model, shard each global batch, step.

The model stays the single-device `ComposerModel`; `parallelize` rewrites it from the
outside (expert parallelism, then context parallelism) and returns a `Parallel` handle
that knows the groups. A step is

    plan the global batch over DP ranks (Karmarkar-Karp on a*L + L^2, `packing`)
    -> this DP rank's packed row, next-token targets computed on the whole row
    -> this CP rank's head-tail shard of tokens, positions and targets
    -> the one training step, with three parallel hooks: gradient sync after backward,
       the global gradient norm, and the per-expert load all-reduced for the bias.

The loss of every rank is its cross-entropy *sum* divided by the number of targets in
the whole global batch, so the summed gradients equal the single-process gradient of the
mean loss exactly (up to float summation order).

`train_step` below is the project's step (`composer_model.training.train_step`) with those
hooks threaded through; until that function takes the hooks, this module carries the same
sequence of operations (see the package README, "Wiring").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from composer_model import ComposerModel, ModelConfig
from composer_model.losses import IGNORE, document_targets
from composer_parallel.context import ContextParallel, CPMode, apply_context_parallel
from composer_parallel.data import clip_gradients, sync_gradients
from composer_parallel.expert import Quantize, apply_expert_parallel, load_all_reduce
from composer_parallel.mesh import Meshes, ParallelDims, build_meshes
from composer_parallel.packing import attention_cost_ratio, plan_global_batch


@dataclass
class Parallel:
    """How a model was parallelized in this process (None fields: that dimension is 1)."""

    dims: ParallelDims
    rank: int
    meshes: Meshes | None
    context: ContextParallel | None

    @property
    def dp_index(self) -> int:
        return self.dims.dense_coords(self.rank)[0]

    def sync_gradients(self, model: torch.nn.Module) -> None:
        if self.meshes is None:
            return
        sync_gradients(
            model,
            self.meshes.world_group,
            self.meshes.expert_dp_group if self.dims.ep > 1 else None,
        )

    def clip(self, model: torch.nn.Module, max_norm: float | None) -> float:
        ep = self.meshes.ep_group if self.meshes is not None and self.dims.ep > 1 else None
        return clip_gradients(model, max_norm, ep)

    def load_reduce(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        return None if self.meshes is None else load_all_reduce(self.meshes.world_group)


def parallelize(
    model: ComposerModel,
    dims: ParallelDims,
    cp_mode: CPMode = "allgather",
    quantize: Quantize = "none",
) -> Parallel:
    """Apply ep, then cp, to `model` in place (call in every rank, before the optimizer)."""
    if dims.world_size == 1:
        return Parallel(dims=dims, rank=0, meshes=None, context=None)
    dims.check_experts(model.config.n_routed_experts)
    if dims.cp > 1 and model.mtp_modules:
        raise ValueError(
            "multi-token prediction under context parallelism is not supported yet (its shifted "
            "embeddings cross shard boundaries); build the model with num_nextn_predict_layers=0 "
            "or run with cp=1"
        )
    meshes = build_meshes(dims)
    if dims.ep > 1:
        apply_expert_parallel(model, meshes.ep_group, quantize=quantize)
    context = apply_context_parallel(model, meshes.cp_group, cp_mode) if dims.cp > 1 else None
    return Parallel(dims=dims, rank=dist.get_rank(), meshes=meshes, context=context)


# --- the loss on a sharded global batch -------------------------------------------------


@dataclass
class Objective:
    loss: torch.Tensor
    metrics: Mapping[str, float] = field(default_factory=dict)


def global_batch_loss(
    model: ComposerModel, documents: Sequence[Sequence[int]], parallel: Parallel, a: float
) -> Objective:
    """This rank's share of the mean next-token loss over every document of the global batch."""
    lengths = [len(d) for d in documents]
    plan = plan_global_batch(lengths, parallel.dims.dp, a)
    total_targets = sum(n - 1 for n in lengths)
    (micro,) = plan[parallel.dp_index]
    ids = torch.tensor([t for i in micro.sequences for t in documents[i]], dtype=torch.long)
    targets = document_targets(ids, micro.cu_seqlens, 1)
    if parallel.context is None:
        out = model(ids[None], cu_seqlens=micro.cu_seqlens)
        logits = out.logits[0]
    else:
        shard = parallel.context.shard(micro.cu_seqlens)
        with parallel.context.use(shard):
            out = model(
                shard.shard(ids)[None],
                positions=shard.positions[None],
                cu_seqlens=shard.local_cu_seqlens,
            )
        logits = out.logits[0]
        targets = shard.shard(targets)
    loss = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE, reduction="sum")
    return Objective(loss=loss / total_targets)


# --- the step ---------------------------------------------------------------------------


@dataclass
class StepStats:
    loss: float  # the global batch's mean loss (summed over ranks)
    grad_norm: float


def train_step(
    model: ComposerModel,
    optimizer: torch.optim.Optimizer,
    compute_loss_fn: Callable[[], Objective],
    parallel: Parallel,
    *,
    grad_clip: float | None,
) -> StepStats:
    """`composer_model.training.train_step` with the parallel hooks (see module docstring)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    objective = compute_loss_fn()
    loss = objective.loss
    if not torch.isfinite(loss):
        raise FloatingPointError(f"non-finite loss {float(loss.detach())}: the step was not taken")
    loss.backward()
    parallel.sync_gradients(model)  # hook 1: after backward
    norm = parallel.clip(model, grad_clip)  # hook 2: global norm over sharded experts
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(f"non-finite gradient norm {norm}: the step was not taken")
    optimizer.step()
    model.update_balancing_bias(reduce=parallel.load_reduce())  # hook 3: global expert load
    total = loss.detach().clone()
    if parallel.meshes is not None:
        dist.all_reduce(total, group=parallel.meshes.world_group)
    return StepStats(loss=float(total), grad_norm=norm)


def build_optimizer(
    model: torch.nn.Module, lr: float, weight_decay: float = 0.1
) -> torch.optim.AdamW:
    """AdamW, decay on matrices only: `composer_model.training.build_optimizer`'s rule."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.95),
    )


# --- a self-contained run ---------------------------------------------------------------


def synthetic_batches(vocab: int, steps: int, docs: int, seed: int) -> list[list[list[int]]]:
    """Global batches of `docs` documents of uneven lengths (8..64 tokens), with structure
    to learn (each document counts up from a random start modulo a small range)."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        batch = []
        for _ in range(docs):
            length = int(torch.randint(8, 65, (1,), generator=gen))
            start = int(torch.randint(0, vocab, (1,), generator=gen))
            stride = int(torch.randint(1, 4, (1,), generator=gen))
            batch.append([(start + stride * i) % min(vocab, 512) for i in range(length)])
        batches.append(batch)
    return batches


def run_training(
    rank: int,
    world_size: int,
    dims: ParallelDims,
    config: ModelConfig,
    batches: list[list[list[int]]],
    seed: int = 0,
    lr: float = 3e-3,
    grad_clip: float | None = 1.0,
    cp_mode: CPMode = "allgather",
) -> dict[str, Any]:
    """A few steps of `config` on `batches` under `dims`; every rank returns the loss curve.

    Works in one process (dims all 1, no process group needed) and under `run_local` or
    torchrun with dp * cp processes. The same seed gives every rank the same initial full
    weights, which `parallelize` then shards.
    """
    if world_size != dims.world_size:
        raise ValueError(f"dims {dims} need {dims.world_size} processes; got {world_size}")
    torch.manual_seed(seed)
    model = ComposerModel(config)
    parallel = parallelize(model, dims, cp_mode=cp_mode)
    optimizer = build_optimizer(model, lr)
    a = attention_cost_ratio(config)
    losses, norms = [], []
    for documents in batches:

        def loss(documents: list[list[int]] = documents) -> Objective:
            return global_batch_loss(model, documents, parallel, a)

        stats = train_step(model, optimizer, loss, parallel, grad_clip=grad_clip)
        losses.append(stats.loss)
        norms.append(stats.grad_norm)
    return {"rank": rank, "losses": losses, "grad_norms": norms}


__all__ = [
    "Objective",
    "Parallel",
    "StepStats",
    "build_optimizer",
    "global_batch_loss",
    "parallelize",
    "run_training",
    "synthetic_batches",
    "train_step",
]
