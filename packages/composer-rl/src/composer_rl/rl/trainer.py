"""One RL step: the project's `train_step` on the router-replayed forward and the RL loss.

prime-rl's split: `loss.py` holds the objective on a forward's outputs, this file the step
that feeds it. The training service takes `rl_step` once a batch (`TrainingService.train_rl`)
and publishes the weights it leaves as policy version v+1, so RL shares clipping, Adam, the
balancing-bias update, checkpoints and publishing with pretraining and SFT. A step

    packs the trajectories; the whole batch's counts (`GlobalBatch`) normalise every rank
    -> keeps this dp rank's sequences (`Parallel.dp_sequences`, Karmarkar-Karp)
    -> shards the row once through the parallel handle's layout (`composer_model.training`:
       the whole row in one process, a head-tail shard under cp): token ids, positions,
       the experts the inference engine chose (router replay), the MTP inputs, and the
       per-token records (`rl_targets`), everything that looks ahead computed on the whole
       row first
    -> runs the policy's forward (replaying those experts, with the plausibility guard;
       the MTP depths read the trunk detached) and the frozen reference's (verbatim replay)
    -> hands the outputs to `composer_rl.rl.loss.rl_loss`, which never calls the model.

The forward replays the experts the inference engine chose for every token, so the
trainer's log-probabilities are those of the network that sampled; the mismatch that
remains is a metric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from composer_infra.checkpoint import Trajectory
from composer_model import ComposerModel, ModelOutput, PackedRow, StepStats, train_step
from composer_model.training import StepInputs, layout_of, run_forward, shard_row, step_labels
from composer_parallel import Parallel, attention_cost_ratio
from composer_rl.rl.batch import PackedBatch, micro_batches, pack
from composer_rl.rl.lineage import VersionTree
from composer_rl.rl.loss import (
    GlobalBatch,
    RLLoss,
    RLLossConfig,
    RLTargets,
    drafted_positions,
    global_batch_of,
    rl_loss,
    whole_batch_metrics,
)
from composer_rl.stages.loop import batch_loss
from composer_rl.stages.packing import Batch


def rl_row(batch: PackedBatch, config: RLLossConfig) -> PackedRow:
    """The packed row the step shards: the batch's tokens, its loss mask (token t is a
    target when the policy sampled it) and, with router replay, the recorded experts."""
    return PackedRow(
        input_ids=batch.input_ids,
        cu_seqlens=batch.cu_seqlens,
        loss_mask=torch.roll(batch.target_mask, 1)[None],
        routing=batch.routing if config.router_replay else None,
    )


def rl_targets(
    batch: PackedBatch,
    row: PackedRow,
    inputs: StepInputs,
    output: ModelOutput,
    whole: GlobalBatch,
) -> RLTargets:
    """The batch's per-token records at the positions of `output` (the forward on `inputs`),
    each computed on the whole row and sharded like the inputs; with MTP, the
    self-distillation labels on the sampled tokens (their teachers gathered ahead)."""
    local = inputs.layout.local
    mtp = None
    if output.mtp_logits:
        mtp = step_labels(
            row,
            inputs.layout,
            output,
            teachers=True,
            denominators=(whole.sampled_tokens, *whole.mtp_targets),
        )
    return RLTargets(
        next_ids=local(torch.roll(batch.input_ids.reshape(-1), -1)),
        target_mask=local(batch.target_mask),
        behaviour_logp=local(batch.behaviour_logp),
        advantages=local(batch.advantages),
        drafted=local(drafted_positions(batch.target_mask)),
        whole=whole,
        mtp=mtp,
    )


def rl_forward_loss(
    model: ComposerModel,
    batch: PackedBatch,
    config: RLLossConfig,
    *,
    whole: GlobalBatch | None = None,
    parallel: Parallel | None = None,
    reference: ComposerModel | None = None,
    anchor: Batch | None = None,
) -> RLLoss:
    """The RL step's forward and loss on `batch`: what `rl_step` hands `train_step`.

    `whole` (a data-parallel rank: `batch` is its share) is the whole batch's counts; None:
    `batch` is the whole batch. `parallel` shards the row (context parallelism; `reference`
    must then share its context, `Parallel.apply_context`). `anchor` (stage-one
    demonstration rows, `stages.packing`; one process only) adds ``anchor_weight`` x SFT's
    loss on them (its own forward, mean next-token cross-entropy on the agent's tokens)."""
    if anchor is not None and parallel is not None:
        raise ValueError(
            "the SFT anchor (loss.anchor_weight > 0) runs in one process only; set "
            "loss.anchor_weight = 0 under --dp/--cp"
        )
    if whole is None:
        whole = global_batch_of(batch, len(model.mtp_modules))
    depths = len(model.mtp_modules) if config.mtp_weight > 0 else 0
    row = rl_row(batch, config)
    inputs = shard_row(row, layout_of(parallel, batch.cu_seqlens), depths)
    output = run_forward(model, inputs, replay_guard=config.replay_guard, mtp_detach_trunk=True)
    reference_output = None
    if reference is not None and (config.kl_coef > 0 or config.kl_metrics):
        with torch.no_grad():
            reference_output = run_forward(reference, inputs, mtp=False)
    targets = rl_targets(batch, row, inputs, output, whole)
    anchored = None
    if anchor is not None and config.anchor_weight > 0:
        anchored = batch_loss(model, anchor, mtp_weight=0.0)  # SFT's own objective
    return rl_loss(output, targets, config, reference=reference_output, anchor=anchored)


def rl_step(
    model: ComposerModel,
    optimizer: torch.optim.Optimizer,
    trajectories: Sequence[Trajectory],
    config: RLLossConfig,
    *,
    grad_clip: float | None,
    lr: float | None = None,
    parallel: Parallel | None = None,
    reference: ComposerModel | None = None,
    anchor: Batch | None = None,
    micro_batch_tokens: int | None = None,
) -> StepStats:
    """One optimizer step (`composer_model.train_step`) of the RL objective on the whole
    batch `trajectories` (every rank of a parallel run is given all of it and trains its
    share); the caller publishes the weights it leaves as the next policy version.

    `micro_batch_tokens` cuts this process's share into micro-batches of at most that many
    tokens, each its share of the whole batch's loss (the same normalisation as a rank's),
    backpropagated one after the other (None: one forward of it all; under `parallel` each
    rank's share is one forward). Same step, bounded memory: a step of 64 episodes took
    12 GB in one forward and was killed on a 24 GB box."""
    whole = global_batch_of(pack(trajectories), len(model.mtp_modules))
    mine: Sequence[Trajectory] = trajectories
    if parallel is not None:
        indices = parallel.dp_sequences(
            [len(t.tokens) for t in trajectories], attention_cost_ratio(model.config)
        )
        mine = [trajectories[i] for i in indices]
    # A parallel rank trains its share in one forward: ranks that cut theirs into different
    # numbers of micro-batches would call the experts' collectives different numbers of times.
    budget = None if parallel is not None else micro_batch_tokens
    runs = micro_batches([len(t.tokens) for t in mine], budget)

    def objective(run: list[int], first: bool) -> Callable[[], RLLoss]:
        def part() -> RLLoss:
            return rl_forward_loss(
                model,
                pack([mine[i] for i in run]),
                config,
                whole=whole,
                parallel=parallel,
                reference=reference,
                anchor=anchor if first else None,  # the anchor's term once a step
            )

        return part

    parts = [objective(run, first=i == 0) for i, run in enumerate(runs)]
    stats = train_step(model, optimizer, parts, grad_clip=grad_clip, lr=lr, parallel=parallel)
    stats.metrics = whole_batch_metrics(stats.metrics)
    return stats


@dataclass(frozen=True)
class StepResult:
    """The training service's answer to one optimizer step (`train_rl`, `train_step`).

    Typed, so the loop reads `result.version` rather than `stats["version"]`: a renamed or
    missing field fails the type check instead of a run. A plain dataclass, so it pickles
    across Ray. `metrics()` is its flat form, the trainer's part of a metrics-log row.
    """

    step: int  # optimizer steps taken so far
    version: int  # the policy version the step published
    stats: StepStats  # the loss, gradient norm, learning rate and the objective's metrics
    tokens: int  # tokens in the batch (every rank's)
    sequences: int  # sequences in the batch
    train_seconds: float  # the step and its publishing, wall-clock

    def metrics(self) -> dict[str, float]:
        return {
            **self.stats.as_dict(),
            "step": self.step,
            "version": self.version,
            "tokens": self.tokens,
            "sequences": self.sequences,
            "train_seconds": self.train_seconds,
        }

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_seconds if self.train_seconds > 0 else 0.0


@dataclass(frozen=True)
class ResumeState:
    """The training service's answer to `resume_state`: where its latest checkpoint (or
    none) left it, typed for the loop like `StepResult`."""

    step: int
    version: int  # the policy version it publishes now (restored weights: a new one)
    loop: dict[str, Any]  # the loop state the checkpoint holds (consumed, dropped groups)
    lineage: VersionTree
    restored: bool  # it restarted a killed trainer, starting a new life


__all__ = ["ResumeState", "StepResult", "rl_forward_loss", "rl_row", "rl_step", "rl_targets"]
