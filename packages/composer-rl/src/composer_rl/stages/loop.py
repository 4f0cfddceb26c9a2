"""The training loop shared by every stage-one phase.

One step: a packed batch (rows chosen by (seed, step)), next-token cross-entropy on the
masked targets plus, once MTP has joined, the MTP self-distillation loss; gradient clipping;
AdamW; the warm-up + cosine schedule; the MoE balancing-bias update. Every `eval_every`
steps the held-out cross-entropy (and MTP acceptance) is measured, every
`checkpoint_every` steps the training state is saved, and a restarted phase carries on from
its newest checkpoint with the same batches it would have seen.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from composer_model import ComposerModel
from composer_model.losses import IGNORE, document_targets, mtp_loss
from composer_rl.stages.checkpoint import load_latest, save_checkpoint
from composer_rl.stages.config import OptimConfig, PhaseConfig
from composer_rl.stages.metrics import MetricsLogger, plot_losses
from composer_rl.stages.packing import Batch, PackedRows, batch_rows, make_batch
from composer_rl.stages.progress import phase_progress


def lr_factor(step: int, steps: int, optim: OptimConfig) -> float:
    """Linear warm-up to 1, then cosine down to `min_lr_ratio` at `steps`."""
    if optim.warmup_steps and step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    span = max(1, steps - optim.warmup_steps)
    progress = min(1.0, (step - optim.warmup_steps) / span)
    return optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """Weight decay on matrices only (not on norms, biases or the router's bias)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": optim.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=optim.lr,
        betas=optim.betas,
    )


def masked_targets(batch: Batch, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Next-token targets inside each document, ignoring tokens the mask leaves out."""
    flat = batch.input_ids.reshape(-1)
    targets = document_targets(flat, cu_seqlens, 1)
    wanted = torch.roll(batch.mask.reshape(-1), -1)
    return torch.where(wanted, targets, torch.full_like(targets, IGNORE))


@dataclass
class StepLoss:
    loss: torch.Tensor
    lm_loss: torch.Tensor
    mtp_loss: torch.Tensor


def phase_loss(model: ComposerModel, batch: Batch, mtp_weight: float) -> StepLoss:
    want_mtp = mtp_weight > 0 and bool(model.mtp_modules)
    output = model(
        batch.input_ids,
        positions=batch.positions,
        cu_seqlens=batch.cu_seqlens,
        return_mtp=want_mtp,
    )
    logits = output.logits.reshape(-1, output.logits.shape[-1]).float()
    lm = F.cross_entropy(logits, masked_targets(batch, output.cu_seqlens), ignore_index=IGNORE)
    extra = mtp_loss(output, batch.input_ids) if want_mtp else lm.new_zeros(())
    return StepLoss(lm + mtp_weight * extra, lm, extra)


@torch.no_grad()
def evaluate(
    model: ComposerModel,
    heldout: PackedRows,
    rows: int,
    rows_per_batch: int,
    with_mtp: bool = False,
    bucket: int | None = None,
) -> dict[str, Any]:
    """Held-out CE on the first `rows` rows; MTP acceptance (greedy draft equals the main
    head's greedy next token) when asked; CE per position bucket when `bucket` is given."""
    was_training = model.training
    model.eval()
    total_loss = torch.zeros((), dtype=torch.float64)
    total_count = 0
    accepted = drafted = 0
    bucket_sum: dict[int, float] = {}
    bucket_count: dict[int, int] = {}
    chosen = list(range(min(rows, len(heldout))))
    for start in range(0, len(chosen), rows_per_batch):
        batch = make_batch(heldout, chosen[start : start + rows_per_batch])
        mtp = with_mtp and bool(model.mtp_modules)
        out = model(
            batch.input_ids, positions=batch.positions, cu_seqlens=batch.cu_seqlens, return_mtp=mtp
        )
        logits = out.logits.reshape(-1, out.logits.shape[-1]).float()
        targets = masked_targets(batch, out.cu_seqlens)
        losses = F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="none")
        valid = targets != IGNORE
        total_loss += losses[valid].double().sum()
        total_count += int(valid.sum())
        if bucket is not None:
            keys = (batch.positions.reshape(-1) // bucket) * bucket
            for key in keys[valid].unique().tolist():
                sel = valid & (keys == key)
                bucket_sum[key] = bucket_sum.get(key, 0.0) + float(losses[sel].sum())
                bucket_count[key] = bucket_count.get(key, 0) + int(sel.sum())
        if mtp and out.mtp_logits:
            draft = out.mtp_logits[0].reshape(-1, logits.shape[-1]).argmax(-1)  # guesses t+2
            verify = torch.roll(logits.argmax(-1), -1)  # main head at t+1 also guesses t+2
            ok = document_targets(batch.input_ids.reshape(-1), out.cu_seqlens, 2) != IGNORE
            ok &= torch.roll(batch.mask.reshape(-1), -2)  # only where token t+2 is a target
            accepted += int((draft == verify)[ok].sum())
            drafted += int(ok.sum())
    model.train(was_training)
    result: dict[str, Any] = {"heldout_ce": float(total_loss) / max(1, total_count)}
    if drafted:
        result["mtp_acceptance"] = accepted / drafted
    if bucket is not None:
        result["position_ce"] = {k: bucket_sum[k] / bucket_count[k] for k in sorted(bucket_sum)}
    return result


def mtp_joins(config: PhaseConfig, step: int, elapsed_s: float) -> bool:
    """Whether the MTP module joins at this step.

    It joins at `mtp_join_step`, or, in a phase with a time limit, once the same fraction
    of the limit has passed: a phase cut short by its limit still trains MTP for its later
    part instead of ending before the join step. A join step past `steps` keeps MTP off.
    """
    join = config.mtp_join_step
    if join is None:
        return True
    if join > config.steps:
        return False
    if step >= join:
        return True
    limit = config.time_limit_s
    return limit is not None and elapsed_s >= limit * join / config.steps


@dataclass
class PhaseResult:
    run_dir: Path
    steps_done: int
    stopped_early: bool
    seconds: float
    final_eval: dict[str, Any] = field(default_factory=dict)
    mtp_joined_at: int | None = None


def train_phase(
    model: ComposerModel,
    config: PhaseConfig,
    train: PackedRows,
    heldout: PackedRows,
    run_dir: Path,
    on_checkpoint: Callable[[int], None] | None = None,
    show_progress: bool = True,
) -> PhaseResult:
    """Run (or resume) one phase to `config.steps`; returns where it got to."""
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    optimizer = build_optimizer(model, config.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, config.steps, config.optim)
    )
    start_step = 0
    mtp_joined_at: int | None = None
    state = load_latest(run_dir)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_step = int(state["step"])
        mtp_joined_at = state.get("mtp_joined_at")
    logger = MetricsLogger(run_dir, resume_step=start_step)
    model.train()
    began = time.monotonic()
    step = start_step
    stopped_early = False
    final_eval: dict[str, Any] = {}

    def checkpoint(at: int) -> None:
        save_checkpoint(
            run_dir,
            at,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "mtp_joined_at": mtp_joined_at,
            },
            keep=config.keep_checkpoints,
        )
        if on_checkpoint is not None:
            on_checkpoint(at)

    progress = phase_progress()
    progress.disable = not show_progress
    with progress:
        bar = progress.add_task(
            config.name, total=config.steps, completed=start_step, loss=float("nan"), tok_s=0.0
        )
        window_tokens, window_start = 0, time.monotonic()
        while step < config.steps:
            if mtp_joined_at is None and mtp_joins(config, step, time.monotonic() - began):
                mtp_joined_at = step
            mtp_on = mtp_joined_at is not None
            batch = make_batch(
                train, batch_rows(len(train), config.rows_per_step, step, config.seed)
            )
            losses = phase_loss(model, batch, config.mtp_weight if mtp_on else 0.0)
            optimizer.zero_grad(set_to_none=True)
            losses.loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
            optimizer.step()
            scheduler.step()
            model.update_balancing_bias()
            step += 1
            window_tokens += batch.num_tokens
            tok_s = window_tokens / max(1e-9, time.monotonic() - window_start)
            logger.log(
                step,
                "train",
                {
                    "loss": float(losses.loss.detach()),
                    "lm_loss": float(losses.lm_loss.detach()),
                    "mtp_loss": float(losses.mtp_loss.detach()),
                    "mtp_on": int(mtp_on),
                    "lr": float(scheduler.get_last_lr()[0]),
                    "grad_norm": float(grad_norm.item()),
                    "tokens": step * config.tokens_per_step,
                    "tokens_per_s": tok_s,
                },
            )
            progress.update(bar, advance=1, loss=float(losses.lm_loss.detach()), tok_s=tok_s)
            last = step == config.steps
            out_of_time = (
                config.time_limit_s is not None and time.monotonic() - began > config.time_limit_s
            )
            if step % config.eval_every == 0 or last or out_of_time:
                final_eval = evaluate(
                    model, heldout, config.eval_rows, config.rows_per_step, with_mtp=mtp_on
                )
                logger.log(step, "eval", final_eval)
            if step % config.checkpoint_every == 0 or last or out_of_time:
                checkpoint(step)
            if out_of_time and not last:
                stopped_early = True
                break
    logger.close()
    plot_losses(run_dir, f"{config.name}: cross-entropy")
    return PhaseResult(
        run_dir=run_dir,
        steps_done=step,
        stopped_early=stopped_early,
        seconds=time.monotonic() - began,
        final_eval=final_eval,
        mtp_joined_at=mtp_joined_at,
    )
