"""The training service of the report: owns the policy and its optimizer, publishes every version.

A plain class; `composer_rl.services.start_services` runs it as a Ray actor. Each
`train_step` is one optimizer step on a token batch, after which the policy version goes
up by one and the new weights go to the weight store in the background
(`WeightPublisher`: XOR deltas, snapshots, manifest last), so inference services pick
them up with a `WeightSubscriber`. Step checkpoints (`StepCheckpointer`) hold the model,
optimizer, RNG state and the policy version; a restarted actor resumes from the latest
and publishes the restored weights under a version number the store has not used.

A step is `composer_model.train_step`, the one step the stage-one phases take too, on an
optimizer from `composer_model.build_optimizer` (weight decay on matrices only, warm-up
then a constant rate, or a cosine to `total_steps` when the run's length is known). The
loss is `composer_model.compute_loss` (next-token cross-entropy + the config's MTP term)
unless the caller passes its own: `train_step(batch, loss_fn=...)` is where the RL
objective plugs into the same step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from composer_infra.checkpoint import StepCheckpointer
from composer_infra.store import (
    ObjectStore,
    PublisherConfig,
    WeightPublisher,
    WeightSubscriber,
    open_store,
)
from composer_model import (
    ComposerModel,
    OptimConfig,
    StepObjective,
    build_optimizer,
    compute_loss,
    lr_at,
    save_pretrained,
    set_threads,
    train_step,
)
from composer_rl.rl.batch import Trajectory, pack
from composer_rl.rl.trainer import RLLossConfig, rl_loss
from composer_rl.services._common import ModelSource, build_model, pack_sequences

LossFn = Callable[[ComposerModel, torch.Tensor, torch.Tensor], StepObjective]
"""An objective for `TrainingService.train_step`: (model, packed input ids [1, T],
cu_seqlens) -> an object with a ``loss`` tensor and a ``metrics`` mapping."""

SERVICE_OPTIM = OptimConfig(lr=1e-3, weight_decay=0.0, warmup_steps=0, min_lr_ratio=1.0)


class TrainingConfig(BaseModel):
    """Optimizer, publishing and checkpoint cadence of the training service."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    optim: OptimConfig = Field(
        default=SERVICE_OPTIM,
        description="AdamW settings and schedule, as in the stage-one phases",
    )
    total_steps: int | None = Field(
        default=None,
        gt=0,
        description="the run's length for the cosine schedule; None: constant after warm-up",
    )
    checkpoint_every: int = Field(
        default=10, ge=0, description="a step checkpoint every N steps; 0 never"
    )
    keep_checkpoints: int = Field(default=3, ge=1)
    snapshot_every: int = Field(default=10, ge=1, description="full weight snapshot every N")
    publish_dtype: str | None = Field(
        default=None, description="e.g. 'bfloat16'; None publishes the parameter dtype"
    )
    seed: int = 0
    threads: int | None = Field(default=None, ge=1, description="torch threads in this process")
    rl: RLLossConfig = Field(default_factory=RLLossConfig, description="the RL objective")
    reference: bool = Field(
        default=False,
        description="keep a frozen copy of the initial policy as the KL reference (RL)",
    )


class TrainingService:
    """Holds the policy and its optimizer; `train_step` -> new policy version, published and
    checkpointed."""

    def __init__(
        self,
        model: ModelSource,
        store_url: str,
        checkpoint_dir: str | Path | None = None,
        config: TrainingConfig | None = None,
    ) -> None:
        self.config = config or TrainingConfig()
        set_threads(self.config.threads)
        self.model: ComposerModel = build_model(model, seed=self.config.seed).train()
        self.optimizer = build_optimizer(self.model, self.config.optim)
        self.checkpointer = (
            StepCheckpointer(checkpoint_dir, keep_last=self.config.keep_checkpoints)
            if checkpoint_dir is not None
            else None
        )
        # The KL reference is the policy we start from (before any checkpoint is restored).
        self.reference: ComposerModel | None = None
        if self.config.reference:
            self.reference = build_model(model, seed=self.config.seed).eval()
            self.reference.requires_grad_(False)
        self.step = 0
        self.policy_version = 0
        self.loop_state: dict[str, Any] = {}
        resumed = self.checkpointer.load(self.model, self.optimizer) if self.checkpointer else None
        if resumed is not None:  # a restarted actor continues where the last checkpoint was
            self.step = resumed.step
            self.policy_version = resumed.policy_version
            self.loop_state = dict(resumed.sampler)
        store = open_store(store_url)
        self._skip_used_versions(store)
        self.publisher = WeightPublisher(
            store,
            PublisherConfig(
                snapshot_every=self.config.snapshot_every,
                publish_dtype=self.config.publish_dtype,
            ),
        )
        # Publish what we start from, so inference has a version before the first step
        # (a restarted trainer: its restored weights, under a fresh version number).
        self._publish()
        self.publisher.flush()

    def _skip_used_versions(self, store: ObjectStore) -> None:
        """Never reuse a version number the store already holds.

        A trainer restarted from a checkpoint at version v may find v+1.. published by
        its previous life (steps after the checkpoint). Subscribers may hold those, and a
        token stamped with a version must name one set of weights, so the restored
        weights are published under the next unused number instead.
        """
        subscriber = WeightSubscriber(store, readers=1)
        try:
            latest = subscriber.latest_version()
        finally:
            subscriber.close()
        if latest is not None and latest >= self.policy_version:
            self.policy_version = latest + 1

    def _publish(self) -> None:
        self.publisher.publish(self.model.state_dict(), self.policy_version)

    def train_step(
        self,
        batch: Sequence[Sequence[int]],
        *,
        wait: bool = False,
        loss_fn: LossFn | None = None,
    ) -> dict[str, Any]:
        """One optimizer step (`composer_model.train_step`) over `batch` (token id
        sequences, packed into one row with document boundaries).

        The objective is `loss_fn(model, input_ids, cu_seqlens)`, by default
        `compute_loss` (next-token + the config's MTP term). Returns the step's metrics
        and the new policy version. Publishing runs in the background; `wait=True` (or
        `flush()`) returns only once the version is visible in the store.
        """
        input_ids, cu_seqlens = pack_sequences(batch, self.model.config.vocab_size)
        objective = loss_fn or _next_token_loss
        stats = self._step(lambda: objective(self.model, input_ids, cu_seqlens), wait=wait)
        stats["tokens"] = int(input_ids.numel())
        return stats

    def train_rl(
        self, trajectories: Sequence[Trajectory], loop_state: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One step of the RL objective (`composer_rl.rl.trainer.rl_loss`) on `trajectories`.

        `loop_state` (the orchestrator's consumed and dropped groups) is stored with the
        next step checkpoint, so a resumed run trains exactly the groups it had not.
        """
        batch = pack(trajectories)
        if loop_state is not None:
            self.loop_state = dict(loop_state)
        stats = self._step(lambda: rl_loss(self.model, batch, self.config.rl, self.reference))
        stats["tokens"] = batch.num_tokens
        stats["sequences"] = batch.num_sequences
        return stats

    def _step(
        self, objective: Callable[[], StepObjective], *, wait: bool = False
    ) -> dict[str, Any]:
        """`composer_model.train_step` on `objective`, then version up, publish, checkpoint."""
        began = time.monotonic()
        try:
            stats = train_step(
                self.model,
                self.optimizer,
                objective,
                grad_clip=self.config.optim.grad_clip,
                lr=lr_at(self.step, self.config.total_steps, self.config.optim),
            )
        except FloatingPointError as error:
            raise FloatingPointError(f"training step {self.step + 1}: {error}") from error
        self.step += 1
        self.policy_version += 1
        self._publish()
        every = self.config.checkpoint_every
        if self.checkpointer is not None and every and self.step % every == 0:
            self.save_checkpoint()
        if wait:
            self.flush()
        return {
            **stats.as_dict(),
            "step": self.step,
            "version": self.policy_version,
            "train_seconds": time.monotonic() - began,
        }

    def save_checkpoint(self) -> str:
        """Write a step checkpoint now; returns its directory."""
        if self.checkpointer is None:
            raise RuntimeError("this training service has no checkpoint_dir")
        path = self.checkpointer.save(
            step=self.step,
            model=self.model,
            optimizer=self.optimizer,
            sampler=self.loop_state,  # the RL loop's consumed / dropped groups
            policy_version=self.policy_version,
        )
        return str(path)

    def version(self) -> int:
        return self.policy_version

    def export(self, directory: str) -> str:
        """Write the current policy with `save_pretrained` (loadable by eval and inference)."""
        save_pretrained(self.model, directory)
        return directory

    def resume_state(self) -> dict[str, Any]:
        """Step, version and loop state restored from the latest checkpoint (empty if none)."""
        return {"step": self.step, "version": self.policy_version, "loop": self.loop_state}

    def flush(self) -> int:
        """Wait until every published version is in the store; returns the current version."""
        self.publisher.flush()
        return self.policy_version

    def close(self) -> None:
        self.publisher.close()


def _next_token_loss(
    model: ComposerModel, input_ids: torch.Tensor, cu_seqlens: torch.Tensor
) -> StepObjective:
    return compute_loss(model, input_ids, cu_seqlens=cu_seqlens)
