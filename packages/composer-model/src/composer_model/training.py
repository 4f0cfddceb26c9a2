"""The one training step and the one optimizer builder.

Pretraining, the long-context phase and SFT (``composer_rl.stages``), the training service
(``composer_rl.rl.services.TrainingService``) and the RL trainer all take an optimizer step
through `train_step` and build their optimizer with `build_optimizer`, so a change to how
a step is taken (clipping, the non-finite check, the MoE balancing-bias update) reaches
every one of them. What differs between them is only the loss, which `train_step` takes
as a callable: `compute_loss` for next-token training, the policy-gradient objective for
RL. Anything that returns an object with a ``loss`` tensor and a ``metrics`` mapping fits.

The schedule is a function of the step (`lr_at`), not optimizer state: a resumed run
recomputes the learning rate from the step it resumes at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from composer_model.model import ComposerModel


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


class ParallelHooks(Protocol):
    """What a data/context/expert-parallel run adds to the step (None: a single process).

    `composer_parallel.Parallel` implements it; this package only names the three points
    where a parallel step differs, so composer-model does not depend on composer-parallel.
    Under parallelism every rank's loss is its share of the global batch's loss (the
    per-rank *sum* over the global count), so summed gradients are the global gradient.
    """

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
    compute_loss_fn: Callable[[], StepObjective],
    *,
    grad_clip: float | None,
    lr: float | None = None,
    parallel: ParallelHooks | None = None,
) -> StepStats:
    """One optimizer step on the loss `compute_loss_fn()` returns.

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
    objective = compute_loss_fn()
    loss = objective.loss
    if loss.dim() != 0:
        raise ValueError(f"the loss must be a scalar tensor, got shape {tuple(loss.shape)}")
    if not torch.isfinite(loss):
        raise FloatingPointError(
            f"non-finite loss {float(loss.detach())}: the step was not taken; lower the "
            "learning rate or check the batch (an all-masked batch has no targets)"
        )
    loss.backward()
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
            f"non-finite gradient norm {grad_norm} (loss {float(loss.detach()):.4f}): the step "
            "was not taken; lower the learning rate"
        )
    optimizer.step()
    metrics = {k: float(v) for k, v in objective.metrics.items()}
    loss_value = float(loss.detach())
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
    "ParallelHooks",
    "StepObjective",
    "StepStats",
    "build_optimizer",
    "lr_at",
    "set_threads",
    "train_step",
]
