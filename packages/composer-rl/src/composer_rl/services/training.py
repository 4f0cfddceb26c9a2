"""The training service of the report: owns the policy and its optimizer, publishes every version.

A plain class; `composer_rl.services.start_services` runs it as a Ray actor. Each
`train_step` is one optimizer step on a token batch, after which the policy version goes
up by one and the new weights go to the weight store in the background
(`WeightPublisher`: XOR deltas, snapshots, manifest last), so inference services pick
them up with a `WeightSubscriber`. Step checkpoints (`StepCheckpointer`) hold the model,
optimizer, RNG state and the policy version; a restarted actor resumes from the latest
and publishes the restored weights under a version number the store has not used.

The loss is next-token cross-entropy (+ the config's MTP term) for now: the RL objective
comes with the RL loop, which calls the same step with its own loss.
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
from composer_model import ComposerModel, compute_loss, save_pretrained
from composer_rl.rl.batch import Trajectory, pack
from composer_rl.rl.trainer import RLLossConfig, rl_loss
from composer_rl.services._common import ModelSource, build_model, pack_sequences, set_threads


class TrainingConfig(BaseModel):
    """Optimizer, publishing and checkpoint cadence of the training service."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lr: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = Field(default=1.0, gt=0, description="None: no clipping")
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
    """Holds the policy and AdamW; `train_step` -> new policy version, published and checkpointed."""

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
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=self.config.lr,
            betas=self.config.betas,
            weight_decay=self.config.weight_decay,
        )
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

    def train_step(self, batch: Sequence[Sequence[int]], *, wait: bool = False) -> dict[str, Any]:
        """One AdamW step on next-token loss over `batch` (token id sequences, packed).

        Returns the losses and the new policy version. Publishing runs in the background;
        `wait=True` (or `flush()`) returns only once the version is visible in the store.
        """
        input_ids, cu_seqlens = pack_sequences(batch, self.model.config.vocab_size)

        def loss_fn() -> tuple[torch.Tensor, dict[str, float]]:
            out = compute_loss(self.model, input_ids, cu_seqlens=cu_seqlens)
            return out.loss, {
                "lm_loss": float(out.lm_loss.detach()),
                "mtp_loss": float(out.mtp_loss.detach()),
            }

        stats = self._step(loss_fn, wait=wait)
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

        def loss_fn() -> tuple[torch.Tensor, dict[str, float]]:
            out = rl_loss(self.model, batch, self.config.rl, self.reference)
            return out.loss, out.metrics

        stats = self._step(loss_fn)
        stats["tokens"] = batch.num_tokens
        stats["sequences"] = batch.num_sequences
        return stats

    def _step(
        self, loss_fn: Callable[[], tuple[torch.Tensor, dict[str, float]]], *, wait: bool = False
    ) -> dict[str, Any]:
        began = time.monotonic()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss, metrics = loss_fn()
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite loss {float(loss.detach())} at step {self.step + 1}; lower lr"
            )
        loss.backward()
        grad_norm = (
            float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip))
            if self.config.grad_clip is not None
            else float("nan")
        )
        self.optimizer.step()
        self.model.update_balancing_bias()
        self.step += 1
        self.policy_version += 1
        self._publish()
        every = self.config.checkpoint_every
        if self.checkpointer is not None and every and self.step % every == 0:
            self.save_checkpoint()
        if wait:
            self.flush()
        return {
            "step": self.step,
            "version": self.policy_version,
            "loss": float(loss.detach()),
            **metrics,
            "grad_norm": grad_norm,
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
