"""The loop every stage-one phase runs, split as torchtitan splits its trainer.

- the step: `composer_model.train_step` (the one the training service and RL take too) on
  `composer_model.lm_forward_loss` (the step's forward, then the one loss,
  `composer_model.compute_loss`, on its outputs: next-token cross-entropy on the batch's
  loss mask, plus, once MTP has joined, the MTP term on the same mask and with the model
  config's `mtp_target`), with the learning rate `composer_model.lr_at` gives for the step;
- the eval decision (`should_eval`): every `eval_every` steps, at the last step, and when
  an opt-in time limit ends the phase early;
- the checkpoint decision (`should_checkpoint`): likewise every `checkpoint_every` steps.

Checkpoints are composer-infra's `StepCheckpointer` (one directory a checkpoint, written
atomically, the newest `keep_checkpoints` kept; an unreadable newest one is logged and the
one before it used). A restarted phase carries on from its newest checkpoint with the same
batches it would have seen: a step's rows are a function of (seed, step).

Under `--dp/--cp/--ep` (torchrun, `parallel` given) every rank takes the same global batch
of rows, keeps its dp share (`Parallel.dp_share`), and trains on its share of the global
loss (the same `lm_forward_loss` given the handle, normalised by the global batch's target
counts) in the same `train_step`; rank 0 alone writes metrics, plots and progress. Step
checkpoints are per rank (`checkpoints/rank-NNN`: each holds its expert shard and its
optimizer state) and resume under the same dims; the phase's exported `final/` model is the
full one. MTP runs under cp too (the step computes its shifted tokens, targets and teacher
on the whole row before sharding them).

A phase is defined by its step count. `time_limit_s` is an explicit opt-in (default: none):
a phase with one stops after the checkpoint of the step that crosses it and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from composer_infra.checkpoint import StepCheckpointer
from composer_model import (
    ComposerModel,
    LossOutput,
    PackedRow,
    StepStats,
    build_optimizer,
    forward_row,
    lm_forward_loss,
    lr_at,
    target_counts,
    train_step,
)
from composer_model.losses import IGNORE, target_ids
from composer_parallel import Parallel
from composer_rl.progress import Show, StepProgress
from composer_rl.stages.config import PhaseConfig
from composer_rl.stages.metrics import MetricsLogger, plot_losses
from composer_rl.stages.packing import Batch, PackedRows, batch_rows, make_batch

CHECKPOINT_DIR = "checkpoints"


def batch_loss(
    model: ComposerModel,
    batch: Batch,
    mtp_weight: float,
    *,
    parallel: Parallel | None = None,
    denominators: list[int] | None = None,
) -> LossOutput:
    """The phase objective on one packed batch: `lm_forward_loss` with the batch's loss mask
    (with `parallel`, this rank's share of the global batch whose `denominators` are given)."""
    return lm_forward_loss(
        model,
        batch.input_ids,
        positions=batch.positions,
        cu_seqlens=batch.cu_seqlens,
        mtp_weight=mtp_weight,
        loss_mask=batch.mask,
        denominators=denominators,
        parallel=parallel,
    )


def phase_step(
    model: ComposerModel,
    optimizer: torch.optim.Optimizer,
    config: PhaseConfig,
    batch: Batch,
    step: int,
    mtp_on: bool,
    parallel: Parallel | None = None,
    local: Batch | None = None,
) -> StepStats:
    """One optimizer step of a phase (0-based `step`) on `batch` (the global batch).

    With `parallel`, this rank trains on `local` (its dp share of `batch`), its loss
    normalised by `batch`'s target counts, and the step's hooks synchronise the ranks."""
    weight = config.mtp_weight if mtp_on else 0.0

    def objective() -> LossOutput:
        if parallel is None:
            return batch_loss(model, batch, weight)
        depths = len(model.mtp_modules)
        return batch_loss(
            model,
            batch if local is None else local,
            weight,
            parallel=parallel,
            denominators=target_counts(batch.input_ids, batch.cu_seqlens, depths, batch.mask),
        )

    return train_step(
        model,
        optimizer,
        objective,
        grad_clip=config.optim.grad_clip,
        lr=lr_at(step, config.steps, config.optim),
        parallel=parallel,
    )


def model_device(model: torch.nn.Module) -> torch.device:
    """Where `model`'s parameters live: a phase sends each batch there (the caller placed
    the model on `Stage1Config.device`)."""
    return next(model.parameters()).device


def out_of_time(config: PhaseConfig, elapsed_s: float) -> bool:
    """Only a phase given a time limit (opt-in) can run out of time."""
    return config.time_limit_s is not None and elapsed_s > config.time_limit_s


def should_eval(config: PhaseConfig, step: int, stopping: bool) -> bool:
    """Evaluate after `step` (1-based count of steps done)?"""
    return step % config.eval_every == 0 or step == config.steps or stopping


def should_checkpoint(config: PhaseConfig, step: int, stopping: bool) -> bool:
    """Checkpoint after `step` (1-based count of steps done)?"""
    return step % config.checkpoint_every == 0 or step == config.steps or stopping


@torch.no_grad()
def evaluate(
    model: ComposerModel,
    heldout: PackedRows,
    rows: int,
    rows_per_batch: int,
    with_mtp: bool = False,
    bucket: int | None = None,
    parallel: Parallel | None = None,
) -> dict[str, Any]:
    """Held-out CE on the first `rows` rows; MTP acceptance (greedy draft equals the main
    head's greedy next token) when asked; CE per position bucket when `bucket` is given.

    Targets are `composer_model.losses.target_ids` with the rows' loss mask, the same
    targets the training loss uses. With `parallel` every rank evaluates the same rows
    (`composer_model.forward_row`: the experts' all-to-all is collective, cp shards are
    gathered)."""
    was_training = model.training
    model.eval()
    total_loss = torch.zeros((), dtype=torch.float64)
    total_count = 0
    accepted = drafted = 0
    bucket_sum: dict[int, float] = {}
    bucket_count: dict[int, int] = {}
    chosen = list(range(min(rows, len(heldout))))
    device = model_device(model)
    for start in range(0, len(chosen), rows_per_batch):
        batch = make_batch(heldout, chosen[start : start + rows_per_batch], device)
        mtp = with_mtp and bool(model.mtp_modules)
        row = PackedRow(batch.input_ids, batch.cu_seqlens, positions=batch.positions)
        out = forward_row(model, row, parallel=parallel, mtp=mtp)
        logits = out.logits.reshape(-1, out.logits.shape[-1]).float()
        targets = target_ids(batch.input_ids, out.cu_seqlens, 1, batch.mask)
        losses = torch.nn.functional.cross_entropy(
            logits, targets, ignore_index=IGNORE, reduction="none"
        )
        valid = targets != IGNORE
        total_loss += losses[valid].double().sum().cpu()
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
            ok = target_ids(batch.input_ids, out.cu_seqlens, 2, batch.mask) != IGNORE
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

    It joins at `mtp_join_step` (step-based: the default). Only in a phase given an opt-in
    time limit does it also join once the same fraction of the limit has passed, so a
    phase cut short by its limit still trains MTP for its later part. A join step past
    `steps` keeps MTP off.
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


def _batch_sampler(config: PhaseConfig) -> dict[str, Any]:
    """What the step checkpoint records of the data order: rows are a function of
    (seed, step), so the seed and the step are the sampler's whole state."""
    return {"kind": "seeded_rows", "seed": config.seed, "rows_per_step": config.rows_per_step}


def _check_same_step(step: int) -> None:
    """Every rank resumed from the same step (per-rank checkpoints written by one run)."""
    span = torch.tensor([step, -step], dtype=torch.int64)
    dist.all_reduce(span, op=dist.ReduceOp.MAX)
    if int(span[0]) != step or -int(span[1]) != step:
        raise RuntimeError(
            f"the ranks resumed from different steps ({-int(span[1])} to {int(span[0])}): a "
            "checkpoint of one rank is missing; remove the newer ones or restart the phase"
        )


def _rank0_decides(flag: bool) -> bool:
    """Rank 0's value of `flag` on every rank (a wall-clock decision must be shared)."""
    value = torch.tensor([int(flag)], dtype=torch.int64)
    dist.broadcast(value, src=0)
    return bool(value.item())


def train_phase(
    model: ComposerModel,
    config: PhaseConfig,
    train: PackedRows,
    heldout: PackedRows,
    run_dir: Path,
    on_checkpoint: Callable[[int], None] | None = None,
    show_progress: Show = True,
    parallel: Parallel | None = None,
) -> PhaseResult:
    """Run (or resume) one phase to `config.steps`; returns where it got to.

    `parallel` (from `composer_parallel.parallelize`, applied to `model` already): run
    this rank's part of a dp x cp x ep phase (see the module docstring)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    device = model_device(model)
    optimizer = build_optimizer(model, config.optim)
    main = parallel is None or parallel.is_main
    checkpoint_root = run_dir / CHECKPOINT_DIR
    if parallel is not None and parallel.dims.world_size > 1:
        checkpoint_root = checkpoint_root / f"rank-{parallel.rank:03d}"
    checkpointer = StepCheckpointer(checkpoint_root, keep_last=config.keep_checkpoints)
    start_step = 0
    mtp_joined_at: int | None = None
    resumed = checkpointer.load(model, optimizer)
    if resumed is not None:
        start_step = resumed.step
        mtp_joined_at = resumed.extra.get("mtp_joined_at")
    if parallel is not None and parallel.meshes is not None:
        _check_same_step(start_step)
    logger = MetricsLogger(run_dir, resume_step=start_step) if main else None
    model.train()
    began = time.monotonic()
    step = start_step
    stopped_early = False
    final_eval: dict[str, Any] = {}

    progress = StepProgress(
        config.name, config.steps, completed=start_step, show=show_progress if main else False
    )
    with progress:
        window_tokens, window_start = 0, time.monotonic()
        while step < config.steps:
            if mtp_joined_at is None and mtp_joins(config, step, time.monotonic() - began):
                mtp_joined_at = step
            mtp_on = mtp_joined_at is not None
            rows = batch_rows(len(train), config.rows_per_step, step, config.seed)
            batch = make_batch(train, rows, device)
            local = None if parallel is None else make_batch(train, parallel.dp_share(rows), device)
            stats = phase_step(model, optimizer, config, batch, step, mtp_on, parallel, local)
            step += 1
            window_tokens += batch.num_tokens
            tok_s = window_tokens / max(1e-9, time.monotonic() - window_start)
            if logger is not None:
                logger.log(
                    step,
                    "train",
                    {
                        **stats.as_dict(),
                        "mtp_on": int(mtp_on),
                        "tokens": step * config.tokens_per_step,
                        "tokens_per_s": tok_s,
                    },
                )
            progress.update(step, info=f"loss {stats.metrics['lm_loss']:.3f}, {tok_s:,.0f} tok/s")
            stopping = out_of_time(config, time.monotonic() - began) and step < config.steps
            if parallel is not None and parallel.meshes is not None:
                stopping = _rank0_decides(stopping)  # every rank stops after the same step
            if should_eval(config, step, stopping):
                final_eval = evaluate(
                    model,
                    heldout,
                    config.eval_rows,
                    config.rows_per_step,
                    with_mtp=mtp_on,
                    parallel=parallel,
                )
                if logger is not None:
                    logger.log(step, "eval", final_eval)
            if should_checkpoint(config, step, stopping):
                checkpointer.save(
                    step=step,
                    model=model,
                    optimizer=optimizer,
                    sampler=_batch_sampler(config),
                    policy_version=step,
                    extra={"phase": config.name, "mtp_joined_at": mtp_joined_at},
                )
                if on_checkpoint is not None:
                    on_checkpoint(step)
            if stopping:
                stopped_early = True
                break
    if logger is not None:
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
