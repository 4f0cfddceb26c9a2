"""Training under dp x cp x ep: parallelize a plain model, shard each global batch, step.

The model stays the single-device `ComposerModel`; `parallelize` rewrites it from the
outside (expert parallelism, then context parallelism) and returns a `Parallel` handle
that knows the groups. A step is

    plan the global batch over DP ranks (Karmarkar-Karp on a*L + L^2, `packing`)
    -> this DP rank's packed row, next-token targets computed on the whole row
    -> this CP rank's head-tail shard of tokens, positions and targets (`sharded_loss`)
    -> the project's one step, `composer_model.train_step(..., parallel=handle)`, whose
       hooks are the gradient sync after backward, the global gradient norm, the
       per-expert load all-reduced for the bias, and the loss shares summed for logging.

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
    ModelOutput,
    OptimConfig,
    build_optimizer,
    compute_loss,
    train_step,
)
from composer_model.losses import lm_loss, mtp_loss, target_ids
from composer_parallel.context import (
    ContextParallel,
    CPMode,
    apply_context_parallel,
    gather_sequence,
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

    def forward(
        self,
        model: ComposerModel,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cu_seqlens: torch.Tensor,
        return_mtp: bool = False,
    ) -> ModelOutput:
        """The model on one packed sequence [1, N], logits for all N tokens on every rank.

        For evaluation: under cp each rank runs its shard (MTP inputs computed on the whole
        row) and the logits are all-gathered back into sequence order (no gradient).
        Without cp it is the plain forward (every rank of an ep group must call it: the
        experts' all-to-all is collective)."""
        if self.context is None:
            return model(
                input_ids, positions=positions, cu_seqlens=cu_seqlens, return_mtp=return_mtp
            )
        flat = input_ids.reshape(-1)
        shard = self.context.shard(cu_seqlens)
        depths = len(model.mtp_modules) if return_mtp else 0
        shifted = [shard.shard(torch.roll(flat, -k)) for k in range(1, depths + 1)]
        group = self.context.group
        with torch.no_grad(), self.context.use(shard):
            out = model(
                shard.shard(flat)[None],
                positions=shard.shard(positions.reshape(-1))[None],
                cu_seqlens=shard.local_cu_seqlens,
                return_mtp=depths > 0,
                mtp_shifted_ids=shifted or None,
            )
            logits = gather_sequence(out.logits[0], shard, group)
            mtp = [gather_sequence(m[0], shard, group)[None] for m in out.mtp_logits or []]
        return ModelOutput(
            logits=logits[None],
            hidden=logits.new_zeros(0),
            routing=None,
            replacements=out.replacements,
            cu_seqlens=cu_seqlens,
            positions=positions.reshape(-1),
            mtp_logits=mtp or None,
        )


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
        if type(model) is ComposerModel:  # MTP then needs its shifted ids from the caller
            model.__class__ = _ContextParallelModel
    return Parallel(dims=dims, rank=dist.get_rank(), meshes=meshes, context=context)


class _ContextParallelModel(ComposerModel):
    """A `ComposerModel` whose attention is context-parallel (class swapped by
    `parallelize`; parameters unchanged). Its MTP forward needs the tokens k ahead of
    every local position from the caller (`mtp_shifted_ids`, computed on the whole row):
    the default roll of the local ids would wrap inside the shard, silently wrong."""

    def forward(self, *args: Any, **kwargs: Any) -> ModelOutput:
        if kwargs.get("return_mtp") and self.mtp_modules and kwargs.get("mtp_shifted_ids") is None:
            raise RuntimeError(
                "multi-token prediction under context parallelism needs mtp_shifted_ids (the "
                "tokens k ahead, computed on the whole row and sharded): use "
                "composer_parallel.sharded_loss or Parallel.forward"
            )
        return super().forward(*args, **kwargs)


def init_distributed() -> bool:
    """Join the process group torchrun describes (WORLD_SIZE > 1); False for one process.

    gloo on CPU, NCCL when CUDA is available (each rank then uses GPU LOCAL_RANK)."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
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


# --- the loss on a sharded global batch -------------------------------------------------


def sharded_loss(
    model: ComposerModel,
    parallel: Parallel,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    cu_seqlens: torch.Tensor,
    denominators: Sequence[int],
    loss_mask: torch.Tensor | None = None,
    mtp_weight: float = 0.0,
    mtp_target: str | None = None,
) -> LossOutput:
    """This rank's share of the global batch's `compute_loss` on its dp share [1, N].

    `denominators` are `target_counts` of the whole global batch (LM, then each MTP depth).
    Without cp this is `compute_loss` with those denominators. Under cp, everything that
    looks ahead is computed on the whole row and then sharded head-tail: the next-token
    targets, each MTP depth's input tokens (k ahead) and targets (k+1 ahead), and the
    self-distillation teacher (the main head's logits k ahead, all-gathered over cp,
    detached: [N, vocab] a rank, affordable for this project's vocabularies; exchanging
    only the k boundary rows a chunk is the scalable version).
    """
    if parallel.context is None:
        return compute_loss(
            model,
            input_ids,
            positions=positions,
            cu_seqlens=cu_seqlens,
            mtp_weight=mtp_weight,
            mtp_target=mtp_target,
            loss_mask=loss_mask,
            denominators=denominators,
        )
    context = parallel.context
    flat = input_ids.reshape(-1)
    depths = len(model.mtp_modules) if mtp_weight > 0 else 0
    shard = context.shard(cu_seqlens)
    local_ids = shard.shard(flat)[None]
    shifted = [shard.shard(torch.roll(flat, -k)) for k in range(1, depths + 1)]
    with context.use(shard):
        output = model(
            local_ids,
            positions=shard.shard(positions.reshape(-1))[None],
            cu_seqlens=shard.local_cu_seqlens,
            return_mtp=depths > 0,
            mtp_shifted_ids=shifted or None,
        )
    main = lm_loss(
        output,
        local_ids,
        targets=shard.shard(target_ids(input_ids, cu_seqlens, 1, loss_mask)),
        denominator=denominators[0],
    )
    extra = main.new_zeros(())
    if depths:
        logits = output.logits[0].detach()
        whole = gather_sequence(logits, shard, context.group)  # [N, vocab], no gradient
        extra = mtp_loss(
            output,
            local_ids,
            mtp_target or model.config.mtp_target,
            denominators=denominators[1:],
            targets=[
                shard.shard(target_ids(input_ids, cu_seqlens, k + 1, loss_mask))
                for k in range(1, depths + 1)
            ],
            teachers=[
                shard.shard(torch.roll(whole, -k, dims=0), dim=0) for k in range(1, depths + 1)
            ],
        )
    return LossOutput(loss=main + mtp_weight * extra, lm_loss=main, mtp_loss=extra, output=output)


def global_batch_loss(
    model: ComposerModel, documents: Sequence[Sequence[int]], parallel: Parallel, a: float
) -> LossOutput:
    """This rank's share of the mean next-token loss over every document of the global batch
    (documents placed on dp ranks by `plan_global_batch`, one micro-batch a rank)."""
    lengths = [len(d) for d in documents]
    plan = plan_global_batch(lengths, parallel.dims.dp, a)
    total_targets = sum(n - 1 for n in lengths)
    (micro,) = plan[parallel.dp_index]
    ids = torch.tensor([t for i in micro.sequences for t in documents[i]], dtype=torch.long)
    positions = torch.cat([torch.arange(lengths[i]) for i in micro.sequences])
    cu = torch.as_tensor(micro.cu_seqlens, dtype=torch.int32)
    return sharded_loss(model, parallel, ids[None], positions[None], cu, [total_targets])


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
    "sharded_loss",
    "synthetic_batches",
]
