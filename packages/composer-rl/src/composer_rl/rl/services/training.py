"""The training service of the report: owns the policy and its optimizer, publishes every version.

A plain class; `composer_rl.rl.services.start_services` runs it as a Ray actor. Each
`train_step` is one optimizer step on a token batch, after which the policy version goes
up by one and the new weights go to the weight store in the background
(`WeightPublisher`: XOR deltas, snapshots, manifest last), so inference services pick
them up with a `WeightSubscriber`. Step checkpoints (`StepCheckpointer`) hold the model,
optimizer, RNG state and the policy version; a restarted actor resumes from the latest
and publishes the restored weights under a version number the store has not used,
starting a new life of the version tree (`composer_rl.rl.lineage`, `checkpoints/
lineage.json`) that tells the loop which weights every version number names.

A step is `composer_model.train_step`, the one step the stage-one phases take too, on an
optimizer from `composer_model.build_optimizer` (weight decay on matrices only, warm-up
then a constant rate, or a cosine to `total_steps` when the run's length is known). The
objective is `composer_model.lm_forward_loss` (the step's forward, then the one loss on
its outputs: next-token cross-entropy + the config's MTP term) unless the caller passes its
own; `train_rl(trajectories)` is the RL step (`composer_rl.rl.trainer.rl_step`: the same
`train_step` on a router-replayed forward and `composer_rl.rl.loss.rl_loss`).

Data, context and expert parallelism (`TrainingConfig.parallel`, dp x cp ranks, ep dividing
them): every rank constructs the service inside one process group (torchrun, or the Ray
rank actors of `composer_rl.rl.services.launch`) and calls `train_rl` (or `train_step`) with
the *same* whole batch; each dp rank keeps its share (`Parallel.dp_sequences`:
Karmarkar-Karp on a*L + L^2), the step shards it once for each cp rank (next tokens, MTP
inputs, targets and teachers computed on the whole row), the loss is the rank's share of
the whole batch's (its normalisers are the whole batch's counts), and the step's parallel
hooks sum gradients and metrics.
Rank 0 alone publishes (the full weights, expert shards gathered) and exports; step
checkpoints are per rank (`rank-NNN/`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field

from composer_infra.checkpoint import StepCheckpointer, Trajectory
from composer_infra.store import (
    ObjectStore,
    PublisherConfig,
    WeightPublisher,
    WeightSubscriber,
)
from composer_model import (
    ComposerModel,
    OptimConfig,
    StepObjective,
    StepStats,
    build_optimizer,
    lm_forward_loss,
    lr_at,
    save_pretrained,
    set_threads,
    target_counts,
    train_step,
)
from composer_model.model import positions_from_cu_seqlens
from composer_parallel import attention_cost_ratio, full_state_dict
from composer_rl.plugins import JobPlugins
from composer_rl.rl.lineage import LINEAGE_FILE, VersionTree
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.services._common import ModelSource, build_model, pack_sequences
from composer_rl.rl.trainer import ResumeState, StepResult, rl_step
from composer_rl.stages.config import ParallelConfig
from composer_rl.stages.packing import PackedRows, batch_rows, make_batch, pack_documents

LossFn = Callable[[ComposerModel, torch.Tensor, torch.Tensor], StepObjective]
"""An objective for `TrainingService.train_step`: (model, packed input ids [1, T],
cu_seqlens) -> an object with a ``loss`` tensor and a ``metrics`` mapping."""

ANCHOR_SEQ_LEN = 1024
"""Row length of the SFT anchor's packed demonstrations (the SFT phase's)."""

RL_OPTIM = OptimConfig(lr=1e-4, weight_decay=0.0, warmup_steps=0, min_lr_ratio=1.0)
"""The training service's optimizer by default: RL's (a constant 1e-4 after no warm-up, no
weight decay, clipping at 1.0). Stage one's phases have theirs (`Stage1Config`)."""


class TrainerRestarted(RuntimeError):
    """The trainer was restarted under a running loop (its lineage changed)."""


class TrainingConfig(BaseModel):
    """The training service: its optimizer, parallelism, publishing and checkpoints.

    It is `composer-rl rl`'s ``[train]`` section as it is; the RL run sets the fields that
    follow its other knobs (`seed`, `threads`, the objective `rl` from ``[loss]``, the
    reference policy, the anchor's end-of-text id; `composer_rl.rl.config.RLConfig`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    optim: OptimConfig = Field(
        default=RL_OPTIM,
        description="the RL trainer's AdamW and schedule, a section of its own: its defaults "
        "are RL's (lr 1e-4 constant, no weight decay, no warm-up), not a stage-one phase's",
    )
    total_steps: int | None = Field(
        default=None,
        gt=0,
        description="the run's length for the cosine schedule; none: constant after warm-up",
    )
    checkpoint_every: int = Field(
        default=1,
        ge=0,
        description="steps between trainer checkpoints (0: never): a kill loses the steps since "
        "the last one (their groups are trained again); the tiny preset's is 32 MiB in "
        "0.1-0.3 s, under a hundredth of a step (benchmarks/kill_cost.py)",
    )
    keep_checkpoints: int = Field(default=3, ge=1, description="step checkpoints kept")
    micro_batch_tokens: int | None = Field(
        default=16384,
        gt=0,
        description="an RL step is trained in micro-batches of at most this many tokens, "
        "gradients accumulated (none: the whole batch in one forward); memory follows the "
        "micro-batch: 64 episodes in one forward took 12 GB. One process only: a parallel "
        "rank trains its share in one forward",
    )
    snapshot_every: int = Field(
        default=10, ge=1, description="a full weight snapshot every N versions (XOR deltas between)"
    )
    publish_dtype: Literal["float32", "bfloat16"] | None = Field(
        default=None,
        description="precision of the weights the engines receive (none: the trainer's, "
        "float32). 'bfloat16' halves the sync's bytes, and the engines then decode with "
        "bf16-rounded weights while the trainer keeps float32: a train/inference mismatch "
        "of the kind router replay corrects (the router-replay study's learning runs)",
    )
    parallel: ParallelConfig = Field(
        default_factory=ParallelConfig,
        description="dp x cp training ranks (ep dividing them) in one process group: the Ray "
        "rank actors of `composer-rl rl` (also --dp, --cp, --ep), or torchrun",
    )
    anchor_data: Path | None = Field(
        default=None,
        description="a stage-one run's sft_tokens.pt: the SFT anchor's demonstrations, for "
        "loss.anchor_weight > 0 (composer-rl rl's default: the one of the stage-one run the "
        "model comes from, MODEL/../../sft_tokens.pt)",
    )
    seed: int = Field(default=0, description="seed of the model's initialisation and the anchor")
    threads: int | None = Field(default=None, ge=1, description="torch threads in this process")
    rl: RLLossConfig = Field(default_factory=RLLossConfig, description="the RL objective")
    reference: bool = Field(
        default=False,
        description="keep a frozen copy of the initial policy as the KL reference (RL)",
    )
    anchor_eos_id: int = Field(default=0, ge=0, description="the tokenizer's end-of-text id")

    @property
    def ranks(self) -> int:
        """Training processes: dp x cp (one Ray actor each when above 1)."""
        return self.parallel.world_size


class TrainingService:
    """Holds the policy and its optimizer; `train_step` -> new policy version, published and
    checkpointed."""

    def __init__(
        self,
        model: ModelSource,
        store_url: str,
        checkpoint_dir: str | Path | None = None,
        config: TrainingConfig | None = None,
        *,
        plugins: JobPlugins | None = None,
    ) -> None:
        self.config = config or TrainingConfig()
        # The job's plugins: the weight store is looked up in them (a service made alone is a
        # job of its own, with the default configuration).
        self.plugins = plugins if plugins is not None else JobPlugins()
        set_threads(self.config.threads)
        self.model: ComposerModel = build_model(model, seed=self.config.seed).train()
        self.parallel = self.config.parallel.apply(self.model)
        self.optimizer = build_optimizer(self.model, self.config.optim)
        # The version tree lives beside the checkpoints (one file for all ranks).
        self.lineage_path = Path(checkpoint_dir) / LINEAGE_FILE if checkpoint_dir else None
        if checkpoint_dir is not None and self.parallel is not None:
            checkpoint_dir = Path(checkpoint_dir) / f"rank-{self.parallel.rank:03d}"
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
        if self.parallel is not None and self.reference is not None:
            self.parallel.apply_context(self.reference)  # runs on the policy's cp shards
        self.anchor = self._anchor_rows()
        self.step = 0
        self.policy_version = 0
        self.loop_state: dict[str, Any] = {}
        resumed = self.checkpointer.load(self.model, self.optimizer) if self.checkpointer else None
        restored = resumed is not None
        if resumed is not None:  # a restarted actor continues where the last checkpoint was
            self.step = resumed.step
            self.policy_version = resumed.policy_version
            self.loop_state = dict(resumed.sampler)
        restored_version = self.policy_version
        self.publisher: WeightPublisher | None = None
        if self._main:  # one writer of the weight store
            store = self.plugins.open_store(store_url)
            restored = self._skip_used_versions(store, restored) or restored
            self.publisher = WeightPublisher(
                store,
                PublisherConfig(
                    snapshot_every=self.config.snapshot_every,
                    publish_dtype=self.config.publish_dtype,
                ),
            )
        if self.parallel is not None:  # every rank takes rank 0's version number
            version = torch.tensor([self.policy_version], dtype=torch.int64)
            dist.broadcast(version, src=0)
            self.policy_version = int(version.item())
        self.lineage = VersionTree.load(self.lineage_path) if self.lineage_path else VersionTree()
        self.restored = restored and self.policy_version != restored_version
        if self.restored:
            # A new life: its first version republishes the restored weights (the tree is
            # written before they go out, so no token ever names a version it lacks).
            self.lineage = self.lineage.restart(self.policy_version, self.step, restored_version)
            if self._main and self.lineage_path is not None:
                self.lineage.save(self.lineage_path)
        # Publish what we start from, so inference has a version before the first step
        # (a restarted trainer: its restored weights, under a fresh version number).
        self._publish()
        self.flush()

    def _skip_used_versions(self, store: ObjectStore, restored: bool) -> bool:
        """Never reuse a version number the store already holds; returns whether it held any.

        A trainer restarted from a checkpoint at version v may find v+1.. published by
        its previous life (steps after the checkpoint). Subscribers may hold those, and a
        token stamped with a version must name one set of weights, so the restored
        weights are published under the next unused number instead. A restored
        checkpoint's own number is skipped too even when the store lost it (its previous
        life was killed before the upload finished): every life starts at a new number,
        so the version tree (`composer_rl.rl.lineage`) tells the lives apart.
        """
        subscriber = WeightSubscriber(store, readers=1)
        try:
            latest = subscriber.latest_version()
        finally:
            subscriber.close()
        floor = self.policy_version + 1 if restored else self.policy_version
        if latest is not None:
            floor = max(floor, latest + 1)
        self.policy_version = floor
        return latest is not None

    @property
    def _main(self) -> bool:
        return self.parallel is None or self.parallel.is_main

    def _full_state(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (collective under parallelism: experts gathered)."""
        if self.parallel is None:
            return self.model.state_dict()
        return full_state_dict(self.model, self.parallel)

    def _publish(self) -> None:
        state = self._full_state()
        if self.publisher is not None:
            self.publisher.publish(state, self.policy_version)

    def _anchor_rows(self) -> PackedRows | None:
        """The SFT anchor's demonstrations, packed as the SFT phase packs them."""
        if self.config.rl.anchor_weight == 0:
            return None
        if self.parallel is not None:
            raise ValueError(
                "the SFT anchor (loss.anchor_weight > 0) runs in one process only; set "
                "loss.anchor_weight = 0 under --dp/--cp"
            )
        path = self.config.anchor_data
        if path is None or not Path(path).is_file():
            raise FileNotFoundError(
                f"loss.anchor_weight > 0 needs the stage-one demonstrations (sft_tokens.pt), "
                f"not found at {path!r}: set train.anchor_data, or loss.anchor_weight = 0"
            )
        ids, masks = torch.load(path, weights_only=False)["train"]
        return pack_documents(
            ids, ANCHOR_SEQ_LEN, self.config.anchor_eos_id, masks=masks, split_documents=False
        )

    def train_step(
        self,
        batch: Sequence[Sequence[int]],
        *,
        wait: bool = False,
        loss_fn: LossFn | None = None,
    ) -> StepResult:
        """One optimizer step (`composer_model.train_step`) over `batch` (token id
        sequences, packed into one row with document boundaries).

        The objective is `loss_fn(model, input_ids, cu_seqlens)`, by default
        `lm_forward_loss` (next-token + the config's MTP term). Returns a `StepResult`: the
        step's metrics and the new policy version. Publishing runs in the background; `wait=True` (or
        `flush()`) returns only once the version is visible in the store.
        """
        input_ids, cu_seqlens = pack_sequences(batch, self.model.config.vocab_size)
        if self.parallel is not None:
            if loss_fn is not None:
                raise ValueError(
                    "a custom loss_fn does not know the whole batch's normalisation; under "
                    "--dp/--ep the service trains the default next-token objective only"
                )
            return self._parallel_train_step(batch, input_ids, cu_seqlens, wait=wait)
        objective = loss_fn or _next_token_loss
        return self._optimize(
            lambda: self._step(lambda: objective(self.model, input_ids, cu_seqlens)),
            tokens=int(input_ids.numel()),
            sequences=len(batch),
            wait=wait,
        )

    def _parallel_train_step(
        self,
        batch: Sequence[Sequence[int]],
        input_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        *,
        wait: bool,
    ) -> StepResult:
        """This rank's share of the next-token step on the whole `batch` (packed as given)."""
        assert self.parallel is not None
        parallel = self.parallel
        a = attention_cost_ratio(self.model.config)
        mine = [batch[i] for i in parallel.dp_sequences([len(seq) for seq in batch], a)]
        local_ids, local_cu = pack_sequences(mine, self.model.config.vocab_size)
        counts = target_counts(input_ids, cu_seqlens, len(self.model.mtp_modules))
        positions = positions_from_cu_seqlens(local_cu, local_ids.numel())

        def objective() -> StepObjective:
            return lm_forward_loss(
                self.model,
                local_ids,
                positions=positions.reshape(1, -1),
                cu_seqlens=local_cu,
                denominators=counts,
                parallel=parallel,
            )

        return self._optimize(
            lambda: self._step(objective),
            tokens=int(input_ids.numel()),
            sequences=len(batch),
            wait=wait,
        )

    def train_rl(
        self,
        trajectories: Sequence[Trajectory],
        loop_state: dict[str, Any] | None = None,
        life: int | None = None,
    ) -> StepResult:
        """One RL step (`composer_rl.rl.trainer.rl_step`) on `trajectories`, published as
        the next policy version.

        The same `train_step` as `train_step`'s, with the RL loss on a router-replayed
        forward. `loop_state` (the orchestrator's consumed and dropped groups) is stored
        with the next step checkpoint, so a resumed run trains exactly the groups it had not.
        `life` is the trainer life (`VersionTree.life`) the orchestrator chose the batch
        against: a trainer restarted since (a Ray actor restart) raises `TrainerRestarted`
        rather than train on weights the loop did not judge staleness against, or record
        as consumed groups its restored checkpoint never trained.
        """
        if life is not None and life != self.lineage.life:
            raise TrainerRestarted(
                f"the training service restarted from its step-{self.step} checkpoint (trainer "
                f"life {self.lineage.life}, the loop knows life {life}); run the same command "
                "again to resume the loop from the checkpoints"
            )
        if loop_state is not None:
            self.loop_state = dict(loop_state)
        anchor = None
        if self.anchor is not None:  # rows a function of (seed, step): same after resume
            rows = batch_rows(
                len(self.anchor), self.config.rl.anchor_rows, self.step, self.config.seed
            )
            anchor = make_batch(self.anchor, rows)
        return self._optimize(
            lambda: rl_step(
                self.model,
                self.optimizer,
                trajectories,
                self.config.rl,
                grad_clip=self.config.optim.grad_clip,
                lr=lr_at(self.step, self.config.total_steps, self.config.optim),
                parallel=self.parallel,
                reference=self.reference,
                anchor=anchor,
                micro_batch_tokens=self.config.micro_batch_tokens,
            ),
            tokens=sum(len(t.tokens) for t in trajectories),
            sequences=len(trajectories),
        )

    def _step(self, objective: Callable[[], StepObjective]) -> StepStats:
        """`composer_model.train_step` on `objective` at this step's learning rate."""
        return train_step(
            self.model,
            self.optimizer,
            objective,
            grad_clip=self.config.optim.grad_clip,
            lr=lr_at(self.step, self.config.total_steps, self.config.optim),
            parallel=self.parallel,
        )

    def _optimize(
        self, step: Callable[[], StepStats], *, tokens: int, sequences: int, wait: bool = False
    ) -> StepResult:
        """One optimizer step (`step`: `_step` or the RL step) on a batch of `tokens` in
        `sequences`, then version v+1 published (and checkpointed on cadence)."""
        began = time.monotonic()
        try:
            stats = step()
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
        return StepResult(
            step=self.step,
            version=self.policy_version,
            stats=stats,
            tokens=tokens,
            sequences=sequences,
            train_seconds=time.monotonic() - began,
        )

    def save_checkpoint(self, loop_state: dict[str, Any] | None = None) -> str:
        """Write a step checkpoint now; returns its directory.

        `loop_state` replaces the loop state of the last `train_rl` call: the loop's end
        saves what it decided after its last step too (groups dropped since)."""
        if self.checkpointer is None:
            raise RuntimeError("this training service has no checkpoint_dir")
        if loop_state is not None:
            self.loop_state = dict(loop_state)
        path = self.checkpointer.save(
            step=self.step,
            model=self.model,
            optimizer=self.optimizer,
            sampler=self.loop_state,  # the RL loop's consumed and dropped groups
            policy_version=self.policy_version,
        )
        return str(path)

    def version(self) -> int:
        return self.policy_version

    def export(self, directory: str) -> str:
        """Write the current policy with `save_pretrained` (loadable by eval and inference).

        Under parallelism every rank must call it; rank 0 writes the whole model."""
        if self.parallel is None:
            save_pretrained(self.model, directory)
            return directory
        state = self._full_state()
        if self.parallel.is_main:
            full = ComposerModel(self.model.config)
            full.load_state_dict(state)
            save_pretrained(full, directory)
        self.parallel.barrier()
        return directory

    def resume_state(self) -> ResumeState:
        """Step, version and loop state restored from the latest checkpoint (empty if none),
        with the version tree and whether this trainer restarted a killed one (`restored`:
        it republished restored weights under a new version, starting a new life)."""
        return ResumeState(
            step=self.step,
            version=self.policy_version,
            loop=self.loop_state,
            lineage=self.lineage,
            restored=self.restored,
        )

    def flush(self) -> int:
        """Wait until every published version is in the store; returns the current version."""
        if self.publisher is not None:
            self.publisher.flush()
        return self.policy_version

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()


def _next_token_loss(
    model: ComposerModel, input_ids: torch.Tensor, cu_seqlens: torch.Tensor
) -> StepObjective:
    return lm_forward_loss(model, input_ids, cu_seqlens=cu_seqlens)
