"""Training under dp x cp x ep: parallelize a plain model, shard each global batch, step.

The model stays the single-device `ComposerModel`; `parallelize` rewrites its layers from
the outside (expert parallelism, then context parallelism; the model's own class is never
changed) and returns a `Parallel` handle that knows the groups. A step is

    plan the global batch over DP ranks (Karmarkar-Karp on a*L + L^2, `packing`)
    -> this DP rank's packed row
    -> the project's one step, `composer_model.train_step(..., parallel=handle)`, on
       `composer_model.lm_forward_loss(..., parallel=handle)`: the row is sharded once
       through `handle.layout` (this CP rank's head-tail shard of tokens, positions,
       targets and MTP inputs, all computed on the whole row), the forward runs on the
       shard, and the loss gets its outputs; the step's hooks are the gradient sync after
       backward, the global gradient norm, the per-expert load all-reduced for the bias,
       and the loss shares summed for logging.

The loss of every rank is its cross-entropy *sum* divided by the number of targets in
the whole global batch, so the summed gradients equal the single-process gradient of the
mean loss exactly (up to float summation order).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from composer_model import (
    ComposerModel,
    LossOutput,
    ModelConfig,
    OptimConfig,
    RowLayout,
    WholeRow,
    build_optimizer,
    lm_forward_loss,
    train_step,
)
from composer_parallel.context import (
    ContextParallel,
    CPMode,
    apply_context_parallel,
)
from composer_parallel.data import clip_gradients, sync_gradients
from composer_parallel.expert import (
    Quantize,
    apply_expert_parallel,
    is_expert_parameter,
    load_all_reduce,
)
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

    def reduce_metrics(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """Every rank's shares of the loss terms summed over the world (one all-reduce)."""
        if self.meshes is None or not metrics:
            return dict(metrics)
        keys = sorted(metrics)
        values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
        dist.all_reduce(values, group=self.meshes.world_group)
        return dict(zip(keys, values.tolist(), strict=True))

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes metrics, checkpoints of the full model and progress."""
        return self.rank == 0

    def dp_share(self, items: Sequence[Any]) -> list[Any]:
        """This dp rank's items of a global batch (every `dp`-th, from `dp_index`).

        For batches of equal-length packed rows; `plan_global_batch` balances uneven
        sequences instead. The count must divide evenly so every rank steps together."""
        if len(items) % self.dims.dp:
            raise ValueError(
                f"a global batch of {len(items)} rows does not split over dp={self.dims.dp}; "
                "make the rows per step a multiple of --dp"
            )
        return list(items[self.dp_index :: self.dims.dp])

    def barrier(self) -> None:
        if self.meshes is not None:
            dist.barrier(group=self.meshes.world_group)

    def layout(self, cu_seqlens: torch.Tensor) -> RowLayout:
        """Which positions of a packed row this rank runs (`composer_model.RowLayout`):
        its head-tail shard under cp, the whole row otherwise."""
        if self.context is None:
            return WholeRow(cu_seqlens)
        return self.context.layout(cu_seqlens)

    def apply_context(self, model: torch.nn.Module) -> None:
        """Make a second model (RL's frozen reference: its experts whole, no optimizer)
        context-parallel on this handle's shards, so it runs inside the same
        `layout(...).running()` as the trained model. Nothing to do without cp."""
        if self.context is not None:
            apply_context_parallel(
                model, self.context.group, self.context.mode, context=self.context
            )

    def dp_sequences(self, lengths: Sequence[int], a: float) -> list[int]:
        """Indices of this dp rank's sequences of a global batch of uneven `lengths`,
        balanced by `plan_global_batch` (Karmarkar-Karp on a*L + L^2; `a` is
        `attention_cost_ratio`). Every rank gets some."""
        dp = self.dims.dp
        if len(lengths) < dp:
            raise ValueError(f"a batch of {len(lengths)} sequences cannot feed dp={dp} ranks")
        plan = plan_global_batch(list(lengths), dp, a)
        return [i for micro in plan[self.dp_index] for i in micro.sequences]


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
    meshes = build_meshes(dims)
    if dims.ep > 1:
        apply_expert_parallel(model, meshes.ep_group, quantize=quantize)
    context = None
    if dims.cp > 1:
        context = apply_context_parallel(model, meshes.cp_group, cp_mode)
        model.register_forward_pre_hook(_refuse_wrapped_mtp, with_kwargs=True)
    return Parallel(dims=dims, rank=dist.get_rank(), meshes=meshes, context=context)


def _refuse_wrapped_mtp(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """A context-parallel model's MTP forward needs the tokens k ahead of every local
    position from the caller (`mtp_shifted_ids`, computed on the whole row): the model's
    default roll of its local ids would wrap inside the shard, silently wrong."""
    mtp_modules = getattr(model, "mtp_modules", None)
    if kwargs.get("return_mtp") and mtp_modules and kwargs.get("mtp_shifted_ids") is None:
        raise RuntimeError(
            "multi-token prediction under context parallelism needs mtp_shifted_ids (the "
            "tokens k ahead, computed on the whole row and sharded): run the forward "
            "through composer_model.training (shard_row, run_forward, forward_row)"
        )


def init_distributed(backend: str | None = None) -> bool:
    """Join the process group torchrun describes (WORLD_SIZE > 1); False for one process.

    `backend` None: gloo on CPU, NCCL when CUDA is available (each rank then uses GPU
    LOCAL_RANK). A caller whose tensors stay in host memory on a machine with GPUs gives
    "gloo": NCCL cannot reduce CPU tensors."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if chosen == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(chosen)
    return True


def full_state_dict(model: torch.nn.Module, parallel: Parallel) -> dict[str, torch.Tensor]:
    """The unsharded state dict (expert shards all-gathered over ep), on every rank.

    Collective: every rank must call it. The result loads into a plain single-process
    `ComposerModel` of the same config (`save_pretrained` of that model is the full
    checkpoint)."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    if parallel.meshes is None or parallel.dims.ep == 1:
        return state
    group = parallel.meshes.ep_group
    size = dist.get_world_size(group)
    for name in sorted(state):
        if is_expert_parameter(name):
            local = state[name].contiguous()
            parts = [torch.empty_like(local) for _ in range(size)]
            dist.all_gather(parts, local, group=group)
            state[name] = torch.cat(parts)
    return state


# --- the loss on a global batch -------------------------------------------------------


def global_batch_loss(
    model: ComposerModel, documents: Sequence[Sequence[int]], parallel: Parallel, a: float
) -> LossOutput:
    """This rank's share of the mean next-token loss over every document of the global batch
    (documents placed on dp ranks by `plan_global_batch`, one micro-batch a rank)."""
    lengths = [len(d) for d in documents]
    total_targets = sum(n - 1 for n in lengths)
    mine = parallel.dp_sequences(lengths, a)
    ids = torch.tensor([t for i in mine for t in documents[i]], dtype=torch.long)
    positions = torch.cat([torch.arange(lengths[i]) for i in mine])
    cu = torch.tensor([0, *(lengths[i] for i in mine)]).cumsum(0).to(torch.int32)
    return lm_forward_loss(
        model,
        ids[None],
        positions=positions[None],
        cu_seqlens=cu,
        mtp_weight=0.0,
        denominators=[total_targets],
        parallel=parallel,
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
    optimizer = build_optimizer(model, OptimConfig(lr=lr, warmup_steps=0, grad_clip=grad_clip))
    a = attention_cost_ratio(config)
    losses, norms = [], []
    for documents in batches:

        def loss(documents: list[list[int]] = documents) -> LossOutput:
            return global_batch_loss(model, documents, parallel, a)

        stats = train_step(model, optimizer, loss, grad_clip=grad_clip, parallel=parallel)
        losses.append(stats.loss)
        norms.append(stats.grad_norm)
    return {"rank": rank, "losses": losses, "grad_norms": norms}


__all__ = [
    "Parallel",
    "full_state_dict",
    "global_batch_loss",
    "init_distributed",
    "parallelize",
    "run_training",
    "synthetic_batches",
]
