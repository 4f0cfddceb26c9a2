"""The one training step and the one optimizer builder.

Pretraining, the long-context phase and SFT (``composer_rl.stages``), the training service
(``composer_rl.rl.services.TrainingService``) and the RL trainer (``composer_rl.rl.trainer``)
all take an optimizer step through `train_step` and build their optimizer with
`build_optimizer`, so a change to how a step is taken (clipping, the non-finite check, the
MoE balancing-bias update) reaches every one of them. What differs between them is only
the objective, which `train_step` takes as a callable: anything that returns an object with
a ``loss`` tensor and a ``metrics`` mapping fits.

The objective is the step's forward, then a loss on its outputs, as in torchtitan's train
step: the row is sharded once (`shard_row`: inputs, positions, replay indices and the MTP
inputs, for the ranks that split a row under context parallelism, by the `RowLayout` the
parallel hooks give; the whole row in one process), the model runs on it (`run_forward`),
the labels are made on the whole row and sharded alike (`step_labels`), and the outputs
and labels go to a loss that never calls the model and knows nothing of parallelism
(`composer_model.losses.compute_loss`; RL's `composer_rl.rl.loss.rl_loss`).
`lm_forward_loss` is that objective for next-token training.

The schedule is a function of the step (`lr_at`), not optimizer state: a resumed run
recomputes the learning rate from the step it resumes at.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from composer_model.losses import Labels, LossOutput, compute_loss, target_ids
from composer_model.model import ComposerModel, ModelOutput, positions_from_cu_seqlens


class OptimConfig(BaseModel):
    """AdamW with weight decay on matrices only, linear warm-up, then cosine decay.

    The defaults are pretraining's; a caller that trains otherwise (another phase, RL)
    holds an instance of its own with its own defaults.

    The learning rate rises linearly over `warmup_steps` to `lr`, then follows a cosine
    down to `min_lr_ratio * lr` at the run's last step (`lr_at`); a run with no known
    length stays at `lr` after the warm-up.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(default=3e-3, gt=0, description="peak learning rate")
    min_lr_ratio: float = Field(
        default=0.1, ge=0, le=1, description="the cosine's floor, as a share of lr (1: constant)"
    )
    warmup_steps: int = Field(default=10, ge=0, description="steps of linear warm-up to lr")
    weight_decay: float = Field(default=0.1, ge=0, description="AdamW's, on matrices only")
    betas: tuple[float, float] = Field(default=(0.9, 0.95), description="Adam's betas")
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="max global grad norm; None: no clipping"
    )


def build_optimizer(model: torch.nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms, biases or router biases).

    Decaying a norm's gain or a bias pulls it towards zero for no benefit; the usual
    practice (GPT-2 onwards) decays only the weight matrices and embeddings.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters; nothing to optimize")
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": optim.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=optim.lr,
        betas=optim.betas,
    )


def lr_at(step: int, total_steps: int | None, optim: OptimConfig) -> float:
    """The learning rate of (0-based) `step`: warm-up, then cosine to the floor at the end.

    `total_steps` None: a run of unknown length (the training service driven by RL)
    stays at `optim.lr` after the warm-up.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if optim.warmup_steps and step < optim.warmup_steps:
        return optim.lr * (step + 1) / optim.warmup_steps
    if total_steps is None:
        return optim.lr
    span = max(1, total_steps - optim.warmup_steps)
    progress = min(1.0, (step - optim.warmup_steps) / span)
    factor = optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (
        1 + math.cos(math.pi * progress)
    )
    return optim.lr * factor


class StepObjective(Protocol):
    """What a loss callable returns: the scalar to backpropagate and what to log about it."""

    @property
    def loss(self) -> torch.Tensor: ...

    @property
    def metrics(self) -> Mapping[str, float]: ...


class RowLayout(Protocol):
    """Which positions of a packed row this rank runs: every one in one process
    (`WholeRow`), a head-tail shard of each document under context parallelism
    (`composer_parallel`'s). The step is written against this alone, so inputs, targets
    and replay indices are sharded in one place and no loss knows of it."""

    @property
    def cu_seqlens(self) -> torch.Tensor:
        """The document (or chunk) boundaries of this rank's positions, for the model."""
        ...

    def local(self, row: torch.Tensor) -> torch.Tensor:
        """This rank's entries of a whole-row tensor whose dim 0 runs over the row's tokens."""
        ...

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """The whole row's entries (dim 0, in row order) from every rank's `local` ones;
        collective under context parallelism (every rank of the row calls it)."""
        ...

    def running(self) -> AbstractContextManager[object]:
        """The forward runs inside this (context-parallel attention reads the shard)."""
        ...


@dataclass(frozen=True)
class WholeRow:
    """The `RowLayout` of one process (and of data or expert parallelism alone): this rank
    runs every position of the row."""

    cu_seqlens: torch.Tensor

    def local(self, row: torch.Tensor) -> torch.Tensor:
        return row

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        return local

    def running(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()


class ParallelHooks(Protocol):
    """What a data/context/expert-parallel run adds to the step (None: a single process).

    `composer_parallel.Parallel` implements it; this package only names the points where a
    parallel step differs, so composer-model does not depend on composer-parallel. Under
    parallelism every rank's loss is its share of the global batch's loss (the per-rank
    *sum* over the global count), so summed gradients are the global gradient.
    """

    def layout(self, cu_seqlens: torch.Tensor) -> RowLayout:
        """Which positions of a packed row with boundaries `cu_seqlens` this rank runs."""
        ...

    def sync_gradients(self, model: torch.nn.Module) -> None:
        """Sum the gradients over the ranks that share each parameter (after backward)."""
        ...

    def clip(self, model: torch.nn.Module, max_norm: float | None) -> float:
        """The global gradient norm before clipping (sharded experts counted once)."""
        ...

    def load_reduce(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The all-reduce of per-expert loads for the balancing-bias update."""
        ...

    def reduce_metrics(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """This rank's shares of the loss terms summed into the global batch's values."""
        ...


def layout_of(parallel: ParallelHooks | None, cu_seqlens: torch.Tensor) -> RowLayout:
    """The `RowLayout` of a row in this process: `parallel`'s, or the whole row."""
    return WholeRow(cu_seqlens) if parallel is None else parallel.layout(cu_seqlens)


def look_ahead(layout: RowLayout, local: torch.Tensor, k: int) -> torch.Tensor:
    """At each of this rank's positions t, the whole row's entry at t+k (detached; rolled,
    so the last k positions wrap). Self-distillation's teacher of depth k is the main
    head's logits k ahead, which under context parallelism may sit on another rank."""
    with torch.no_grad():
        return layout.local(torch.roll(layout.gather(local.detach()), -k, dims=0))


@dataclass
class PackedRow:
    """One packed row of documents as the step is given it: whole, before any sharding."""

    input_ids: torch.Tensor  # [1, N]
    cu_seqlens: torch.Tensor  # [documents + 1]
    positions: torch.Tensor | None = None  # [1, N]; None: restarting at every document
    loss_mask: torch.Tensor | None = None  # one bool a token: is it a target?
    routing: torch.Tensor | None = None  # [N, MoE layers, top_k]: the experts to replay

    @classmethod
    def of(
        cls,
        input_ids: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        loss_mask: torch.Tensor | None = None,
    ) -> PackedRow:
        """A row from packed [1, N] ids with `cu_seqlens`, or from a [B, T] batch (B
        documents of length T, laid end to end)."""
        if input_ids.dim() != 2:
            raise ValueError(
                f"input_ids must be [B, T] (or packed [1, T]); got shape {tuple(input_ids.shape)}"
            )
        batch, length = input_ids.shape
        if cu_seqlens is None:
            cu_seqlens = torch.arange(batch + 1, dtype=torch.int32) * length
        elif batch != 1:
            raise ValueError(f"packed input with cu_seqlens must be [1, T]; got batch {batch}")
        return cls(
            input_ids=input_ids.reshape(1, -1),
            cu_seqlens=cu_seqlens,
            positions=None if positions is None else positions.reshape(1, -1),
            loss_mask=None if loss_mask is None else loss_mask.reshape(1, -1),
        )


@dataclass
class StepInputs:
    """This rank's part of a row, as the forward reads it (`shard_row`)."""

    layout: RowLayout
    input_ids: torch.Tensor  # [1, n]
    positions: torch.Tensor  # [1, n], each token's place in its document
    routing: torch.Tensor | None  # [n, MoE layers, top_k]
    mtp_inputs: list[torch.Tensor]  # per MTP depth k: the token k ahead of each position


def shard_row(row: PackedRow, layout: RowLayout, mtp_depths: int = 0) -> StepInputs:
    """Shard a row's inputs once for the forward: ids, positions, the experts to replay and
    each MTP depth's input (the token k ahead, computed on the whole row: a shard's next
    tokens may sit on another rank)."""
    flat = row.input_ids.reshape(-1)
    positions = (
        positions_from_cu_seqlens(row.cu_seqlens.to(flat.device), flat.numel())
        if row.positions is None
        else row.positions.reshape(-1)
    )
    return StepInputs(
        layout=layout,
        input_ids=layout.local(flat)[None],
        positions=layout.local(positions)[None],
        routing=None if row.routing is None else layout.local(row.routing),
        mtp_inputs=[layout.local(torch.roll(flat, -k)) for k in range(1, mtp_depths + 1)],
    )


def run_forward(
    model: ComposerModel,
    inputs: StepInputs,
    *,
    mtp: bool = True,
    replay_guard: float | None = None,
    mtp_detach_trunk: bool = False,
) -> ModelOutput:
    """The model on this rank's `inputs` (replaying their experts when they carry some; the
    MTP depths when `mtp` and the inputs have theirs), inside the layout's `running`."""
    mtp_inputs = inputs.mtp_inputs if mtp else []
    with inputs.layout.running():
        return model(
            inputs.input_ids,
            positions=inputs.positions,
            cu_seqlens=inputs.layout.cu_seqlens,
            replay_indices=inputs.routing,
            replay_guard=replay_guard if inputs.routing is not None else None,
            return_mtp=bool(mtp_inputs),
            mtp_shifted_ids=mtp_inputs or None,
            mtp_detach_trunk=mtp_detach_trunk,
        )


def step_labels(
    row: PackedRow,
    layout: RowLayout,
    output: ModelOutput,
    *,
    teachers: bool,
    denominators: Sequence[int] | None = None,
) -> Labels:
    """The `Labels` of `output` (the forward on `row`'s positions under `layout`): every
    target computed on the whole row (the row's loss mask applied) and sharded like the
    inputs (`shard_row`), and, with `teachers`,
    the main head's logits k ahead for each MTP depth the forward ran (self-distillation;
    collective under context parallelism, so every rank of the row must ask alike)."""
    depths = len(output.mtp_logits or [])
    tokens = [
        layout.local(target_ids(row.input_ids, row.cu_seqlens, shift, row.loss_mask))
        for shift in range(1, depths + 2)
    ]
    ahead = None
    if teachers and depths:
        main = output.logits.reshape(-1, output.logits.shape[-1])
        ahead = [look_ahead(layout, main, k) for k in range(1, depths + 1)]
    return Labels(tokens=tokens, teachers=ahead, denominators=denominators)


def lm_forward_loss(
    model: ComposerModel,
    input_ids: torch.Tensor,
    *,
    positions: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    loss_mask: torch.Tensor | None = None,
    mtp_weight: float | None = None,
    mtp_target: str | None = None,
    denominators: Sequence[int] | None = None,
    parallel: ParallelHooks | None = None,
) -> LossOutput:
    """The next-token objective: the step's forward, then the one loss on its outputs.

    What pretraining, SFT and the training service hand `train_step` (and evaluation
    calls). `input_ids` is a packed [1, T] row with `cu_seqlens`, or a [B, T] batch;
    `loss_mask` (one bool a token; None: every token) masks the LM and MTP terms alike.
    `mtp_weight` and `mtp_target` default to the model config's (`mtp_loss_weight`,
    `mtp_target`); a weight of 0 skips the MTP forward.

    For a rank of a parallel run (`parallel`, e.g. `composer_parallel.parallelize`'s
    handle): `input_ids` is this rank's data-parallel share, `denominators` (the global
    batch's `target_counts`: LM, then each MTP depth) make every term its share of the
    global mean, and under context parallelism the rank runs its shard of the row.
    """
    weight = model.config.mtp_loss_weight if mtp_weight is None else mtp_weight
    if weight < 0:
        raise ValueError(f"mtp_weight must be >= 0, got {weight}")
    target = mtp_target or model.config.mtp_target
    row = PackedRow.of(input_ids, cu_seqlens, positions, loss_mask)
    inputs = shard_row(
        row, layout_of(parallel, row.cu_seqlens), len(model.mtp_modules) if weight > 0 else 0
    )
    output = run_forward(model, inputs)
    labels = step_labels(
        row, inputs.layout, output, teachers=target == "self_distill", denominators=denominators
    )
    return compute_loss(output, labels, mtp_weight=weight, mtp_target=target)


@torch.no_grad()
def forward_row(
    model: ComposerModel,
    row: PackedRow,
    *,
    parallel: ParallelHooks | None = None,
    mtp: bool = False,
) -> ModelOutput:
    """The model on a whole row for evaluation: logits (and with `mtp` every depth's) for
    all of its positions, on every rank (under context parallelism each rank runs its shard
    and the outputs are gathered back into row order; every rank of an expert-parallel
    group must call it, the experts' all-to-all is collective)."""
    layout = layout_of(parallel, row.cu_seqlens)
    inputs = shard_row(row, layout, len(model.mtp_modules) if mtp else 0)
    out = run_forward(model, inputs)
    flat_positions = layout.gather(inputs.positions.reshape(-1))
    return ModelOutput(
        logits=layout.gather(out.logits[0])[None],
        hidden=layout.gather(out.hidden[0])[None],
        routing=None,
        replacements=out.replacements,
        cu_seqlens=row.cu_seqlens.to(device=out.logits.device, dtype=torch.int32),
        positions=flat_positions,
        mtp_logits=[layout.gather(m[0])[None] for m in out.mtp_logits] if out.mtp_logits else None,
    )


@dataclass
class StepStats:
    """What one optimizer step did: the loss it took, the gradient norm before clipping,
    the learning rate it used, and the objective's own metrics."""

    loss: float
    grad_norm: float
    lr: float
    metrics: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float]:
        return {**self.metrics, "loss": self.loss, "grad_norm": self.grad_norm, "lr": self.lr}


def train_step(
    model: ComposerModel,
    optimizer: torch.optim.Optimizer,
    compute_loss_fn: Callable[[], StepObjective] | Sequence[Callable[[], StepObjective]],
    *,
    grad_clip: float | None,
    lr: float | None = None,
    parallel: ParallelHooks | None = None,
) -> StepStats:
    """One optimizer step on the loss `compute_loss_fn()` returns.

    A sequence of callables is one step in micro-batches (gradient accumulation): each
    returns its share of the step's loss (normalised by the whole batch's counts, as a
    data-parallel rank's share is) and is backpropagated before the next runs, so only one
    micro-batch's activations are alive at a time; the step's loss and metrics are the shares
    summed. Memory then follows the micro-batch, not the batch.

    Sets every parameter group's learning rate to `lr` (None keeps the optimizer's),
    zeroes the gradients, runs the forward pass (inside `compute_loss_fn`), refuses a
    non-finite loss or gradient before it reaches the weights, backpropagates, clips the
    global gradient norm to `grad_clip` (None: measured, not clipped), steps the
    optimizer and updates the MoE routers' balancing biases (aux-loss-free balancing).

    With `parallel` (a `ParallelHooks`, e.g. `composer_parallel.parallelize`'s result) the
    gradients are summed over the ranks after backward, the norm is the global one, the
    expert loads are all-reduced before the bias update, and the reported loss and metrics
    are the global batch's (the rank's shares summed); every rank takes the same decisions,
    so a non-finite norm stops them all.
    """
    model.train()
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    parts = [compute_loss_fn] if callable(compute_loss_fn) else list(compute_loss_fn)
    if not parts:
        raise ValueError("train_step needs at least one objective")
    loss_value = 0.0
    metrics: dict[str, float] = {}
    for part in parts:
        objective = part()
        loss = objective.loss
        if loss.dim() != 0:
            raise ValueError(f"the loss must be a scalar tensor, got shape {tuple(loss.shape)}")
        if not torch.isfinite(loss):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(
                f"non-finite loss {float(loss.detach())}: the step was not taken; lower the "
                "learning rate or check the batch (an all-masked batch has no targets)"
            )
        loss.backward()
        loss_value += float(loss.detach())
        for key, value in objective.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + float(value)
    if parallel is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        limit = grad_clip if grad_clip is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
    else:
        parallel.sync_gradients(model)
        grad_norm = parallel.clip(model, grad_clip)
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(
            f"non-finite gradient norm {grad_norm} (loss {loss_value:.4f}): the step "
            "was not taken; lower the learning rate"
        )
    optimizer.step()
    if parallel is None:
        model.update_balancing_bias()
    else:
        model.update_balancing_bias(reduce=parallel.load_reduce())
        reduced = parallel.reduce_metrics({**metrics, "__loss__": loss_value})
        loss_value = reduced.pop("__loss__")
        metrics = reduced
    return StepStats(
        loss=loss_value,
        grad_norm=grad_norm,
        lr=float(optimizer.param_groups[0]["lr"]),
        metrics=metrics,
    )


def set_threads(threads: int | None) -> None:
    """Pin torch's intra-op CPU threads in this process; None leaves torch's default.

    Every training entry point (the stage phases, the services' actors) calls this one
    helper, so a thread count means the same thing wherever it is given.
    """
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"threads must be >= 1 (or None for torch's default), got {threads}")
    torch.set_num_threads(threads)


__all__ = [
    "OptimConfig",
    "PackedRow",
    "ParallelHooks",
    "RowLayout",
    "StepInputs",
    "StepObjective",
    "StepStats",
    "WholeRow",
    "build_optimizer",
    "forward_row",
    "layout_of",
    "lm_forward_loss",
    "look_ahead",
    "lr_at",
    "run_forward",
    "set_threads",
    "shard_row",
    "step_labels",
    "train_step",
]
