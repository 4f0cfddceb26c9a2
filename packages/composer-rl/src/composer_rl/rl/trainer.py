"""The RL objective on the policy: a router-replayed forward, the algorithm, MTP self-distillation.

`rl_loss` is what the training service hands to the project's one training step as its loss
callable, so RL shares clipping, Adam, the balancing-bias update, checkpoints and publishing
with pretraining and SFT. The forward replays the experts the inference engine chose for
every token (router replay, with the plausibility guard), so the trainer's log-probabilities
are those of the network that sampled; the mismatch that remains is a metric.

Under context parallelism (`RLContext`) a rank holds a head-tail shard of each sequence, so
everything that looks ahead is computed on the whole row first and then sharded: the token
each position's log-probability is of, the per-token records (mask, behaviour logprobs,
advantages, replayed experts), the MTP inputs and targets, and the self-distillation
teacher; the main logits are all-gathered (detached) for the teacher and MTP acceptance.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict, Field

from composer_model import ComposerModel, ModelOutput
from composer_model.losses import mtp_loss, target_counts, target_ids
from composer_parallel import ContextParallel, ContextShard
from composer_parallel.context import gather_sequence
from composer_rl.rl.algorithm import KLEstimator, rl_objective
from composer_rl.rl.batch import PackedBatch
from composer_rl.stages.loop import batch_loss
from composer_rl.stages.packing import Batch


class RLLossConfig(BaseModel):
    """The knobs of the RL objective (defaults follow the report where it says)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(
        default=1.0, gt=0, description="the rollouts' sampling temperature (logits / T)"
    )
    is_cap: float | None = Field(
        default=2.0, gt=0, description="truncated importance-weight cap C; None turns it off"
    )
    kl_coef: float = Field(default=0.0, ge=0, description="beta of the KL penalty in the reward")
    kl_estimator: KLEstimator = Field(
        default="k1", description="the KL estimator of the penalty (k1 or k3)"
    )
    kl_metrics: bool = Field(
        default=True, description="run the reference forward for k1/k3 metrics even at beta 0"
    )
    normalizer_tokens: int = Field(
        default=1024,
        ge=1,
        description="loss = sum over tokens / (sequences x this constant); no per-sequence "
        "length normalisation",
    )
    router_replay: bool = Field(
        default=True, description="replay the experts the rollouts routed to in training"
    )
    replay_guard: float | None = Field(
        default=0.1,
        gt=0,
        le=1,
        description="plausibility guard: a replayed expert scoring below this fraction of the "
        "router's own k-th score is replaced; None replays verbatim",
    )
    mtp_weight: float = Field(
        default=0.1,
        ge=0,
        description="MTP self-distillation on the policy's own tokens; it trains the MTP "
        "modules only (the trunk, embedding and head are read detached)",
    )
    anchor_weight: float = Field(
        default=0.0,
        ge=0,
        description="weight of the SFT anchor: next-token cross-entropy on stage-one "
        "demonstrations each step, against the drift of answers RL rewards on some tasks "
        "into tasks that ask for others (0: off)",
    )
    anchor_rows: int = Field(
        default=1, ge=1, description="packed demonstration rows in each step's anchor"
    )


@dataclass(frozen=True)
class GlobalBatch:
    """What a data-parallel rank knows of the whole RL batch, for its share of the loss.

    `num_sequences` replaces this rank's in the loss normaliser (sequences x
    `normalizer_tokens`), `sampled_tokens` weights the per-token mean metrics by this rank's
    share of the sampled tokens, and `mtp_targets` (one count a depth) divides the MTP
    self-distillation sums, so that summing every rank's loss and metrics gives the
    single-process values on the whole batch."""

    num_sequences: int
    sampled_tokens: int
    mtp_targets: tuple[int, ...] = ()


def global_batch_of(batch: PackedBatch, mtp_depths: int) -> GlobalBatch:
    """The `GlobalBatch` of a packed row of every trajectory of the step."""
    sampled = torch.roll(batch.target_mask, 1)
    counts = target_counts(batch.input_ids, batch.cu_seqlens, mtp_depths, sampled)
    return GlobalBatch(
        num_sequences=batch.num_sequences,
        sampled_tokens=int(batch.target_mask.sum()),
        mtp_targets=tuple(counts[1:]),
    )


@dataclass(frozen=True)
class RLContext:
    """The context-parallel handles of a cp rank: the policy's and (when there is one) the
    frozen reference's, both over the same cp group (`apply_context_parallel` on each).

    `rl_loss` with one needs `whole` too: every normaliser is the whole batch's."""

    policy: ContextParallel
    reference: ContextParallel | None = None


@dataclass
class RLLoss:
    """What `train_step` backpropagates, with the step's metrics."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def target_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    temperature: float,
    next_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """log pi(token t + 1 | ..t) at every position t of a packed row ([1, T, V] -> [T]).

    `next_ids` (token t + 1 of every position) replaces the roll of `input_ids`: a
    context-parallel shard's next tokens may sit on another rank."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    if temperature != 1.0:
        flat = flat / temperature
    nxt = torch.roll(input_ids.reshape(-1), -1) if next_ids is None else next_ids.reshape(-1)
    return torch.log_softmax(flat, dim=-1).gather(1, nxt[:, None]).squeeze(1)


def mtp_acceptance(logits: torch.Tensor, mtp_logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Share of positions where the first MTP head's greedy draft equals the main head's
    greedy choice one position later (what greedy speculative decoding would accept)."""
    main = logits.reshape(-1, logits.shape[-1]).argmax(-1)
    draft = mtp_logits.reshape(-1, mtp_logits.shape[-1]).argmax(-1)
    agree = draft == torch.roll(main, -1)
    sel = mask & torch.roll(mask, -1)
    return float(agree[sel].float().mean()) if bool(sel.any()) else 0.0


def rl_loss(
    model: ComposerModel,
    batch: PackedBatch,
    config: RLLossConfig,
    reference: ComposerModel | None = None,
    whole: GlobalBatch | None = None,
    context: RLContext | None = None,
    anchor: Batch | None = None,
) -> RLLoss:
    """The report's RL loss on one packed batch, plus MTP self-distillation (weighted).

    `whole` (a data-parallel rank: `batch` is its share): the loss and the metrics become
    this rank's shares of the whole batch's (see `GlobalBatch`); the training step sums
    them over the ranks. `context` (a context-parallel rank; `whole` required): `batch` is
    the whole row of this rank's dp share, and the rank computes its head-tail shard of it
    (see the module docstring). `anchor` (stage-one demonstration rows, `stages.packing`)
    adds ``anchor_weight`` x SFT's loss on them: the mean next-token cross-entropy on the
    agent's own tokens (one process only)."""
    if context is not None and whole is None:
        raise ValueError("rl_loss under context parallelism needs `whole` (the global counts)")
    if anchor is not None and (whole is not None or context is not None):
        raise ValueError(
            "the SFT anchor (loss.anchor_weight > 0) runs in one process only; set "
            "loss.anchor_weight = 0 under --dp/--cp"
        )
    replay = batch.routing if config.router_replay else None
    want_mtp = config.mtp_weight > 0 and bool(model.mtp_modules)
    depths = len(model.mtp_modules) if want_mtp else 0
    flat = batch.input_ids.reshape(-1)
    sampled = torch.roll(batch.target_mask, 1)  # token t was sampled by the policy
    shard = context.policy.shard(batch.cu_seqlens) if context is not None else None

    def local(row: torch.Tensor) -> torch.Tensor:
        """This rank's tokens of a whole-row tensor (dim 0 runs over the tokens)."""
        return row if shard is None else shard.shard(row, dim=0)

    ids = local(flat)[None]
    positions = None if shard is None else shard.positions[None]
    cu_seqlens = batch.cu_seqlens if shard is None else shard.local_cu_seqlens
    local_replay = None if replay is None else local(replay)
    next_ids = None if shard is None else local(torch.roll(flat, -1))
    shifted = (
        [local(torch.roll(flat, -k)) for k in range(1, depths + 1)]
        if shard is not None and depths
        else None
    )
    with _on_shard(context.policy if context is not None else None, shard):
        output = model(
            ids,
            positions=positions,
            cu_seqlens=cu_seqlens,
            replay_indices=local_replay,
            replay_guard=config.replay_guard if replay is not None else None,
            return_mtp=want_mtp,
            mtp_shifted_ids=shifted,
            mtp_detach_trunk=True,
        )
    logp = target_logprobs(output.logits, ids, config.temperature, next_ids)
    ref_logp = None
    if reference is not None and (config.kl_coef > 0 or config.kl_metrics):
        if context is not None and context.reference is None:
            raise ValueError(
                "a reference model under context parallelism needs RLContext.reference"
            )
        ref_context = context.reference if context is not None else None
        with torch.no_grad(), _on_shard(ref_context, shard):
            ref_out = reference(
                ids, positions=positions, cu_seqlens=cu_seqlens, replay_indices=local_replay
            )
            ref_logp = target_logprobs(ref_out.logits, ids, config.temperature, next_ids)
    terms = rl_objective(
        logp,
        local(batch.behaviour_logp),
        local(batch.advantages),
        local(batch.target_mask),
        normalizer=float(
            (batch.num_sequences if whole is None else whole.num_sequences)
            * config.normalizer_tokens
        ),
        is_cap=config.is_cap,
        ref_logp=ref_logp,
        kl_coef=config.kl_coef,
        kl_estimator=config.kl_estimator,
    )
    loss = terms.loss
    metrics = {
        "pg_loss": float(terms.loss.detach()),
        "sampled_tokens": float(terms.tokens),
        "is_capped_share": terms.is_capped_share,
        "kl_k1": terms.k1_mean,
        "kl_k3": terms.k3_mean,
        "kl_k1_var": terms.k1_var,
        "kl_k3_var": terms.k3_var,
        "logprob_mismatch": terms.mismatch_mean,
        "replay_replacements": float(output.replacements),
    }
    if want_mtp and output.mtp_logits:
        # Self-distillation onto the main head on the tokens the policy sampled.
        denominators = None if whole is None else whole.mtp_targets
        if shard is None or context is None:
            extra = mtp_loss(
                output, batch.input_ids, "self_distill", sampled, denominators=denominators
            )
            acceptance = mtp_acceptance(
                output.logits.detach(), output.mtp_logits[0].detach(), batch.target_mask
            )
        else:
            main, draft = _gathered(output, shard, context.policy)
            extra = mtp_loss(
                output,
                ids,
                "self_distill",
                denominators=denominators,
                targets=[
                    local(target_ids(batch.input_ids, batch.cu_seqlens, k + 1, sampled))
                    for k in range(1, depths + 1)
                ],
                teachers=[local(torch.roll(main, -k, dims=0)) for k in range(1, depths + 1)],
            )
            # On the whole row (every cp rank of it alike), weighted below by token share.
            acceptance = mtp_acceptance(main, draft, batch.target_mask)
        loss = loss + config.mtp_weight * extra
        metrics["mtp_loss"] = float(extra.detach())
        metrics["mtp_acceptance"] = acceptance
    if anchor is not None and config.anchor_weight > 0:
        anchored = batch_loss(model, anchor, mtp_weight=0.0)  # SFT's own objective
        loss = loss + config.anchor_weight * anchored.loss
        metrics["anchor_loss"] = float(anchored.loss.detach())
    if whole is not None:  # per-token means -> this rank's token-weighted share
        share = terms.tokens / max(1, whole.sampled_tokens)
        for key in MEAN_METRICS:
            if key in metrics:
                metrics[key] *= share
    return RLLoss(loss=loss, metrics=metrics)


@contextlib.contextmanager
def _on_shard(context: ContextParallel | None, shard: ContextShard | None) -> Iterator[None]:
    """Run a context-parallel model on `shard` (nothing to do in one process)."""
    if context is None or shard is None:
        yield
        return
    with context.use(shard):
        yield


def _gathered(
    output: ModelOutput, shard: ContextShard, context: ContextParallel
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole row's main logits and first MTP depth's logits ([T, V] each, detached),
    all-gathered over cp: the self-distillation teacher k ahead may sit on another rank."""
    assert output.mtp_logits is not None
    with torch.no_grad():
        main = gather_sequence(output.logits[0].detach(), shard, context.group)
        draft = gather_sequence(output.mtp_logits[0][0].detach(), shard, context.group)
    return main, draft


MEAN_METRICS = ("is_capped_share", "kl_k1", "kl_k3", "logprob_mismatch", "mtp_acceptance")
"""Metrics that are means over the sampled tokens (weighted by token share under dp; the
share of `mtp_acceptance` is by sampled tokens, an approximation of its own count)."""


__all__ = [
    "GlobalBatch",
    "RLContext",
    "RLLoss",
    "RLLossConfig",
    "global_batch_of",
    "mtp_acceptance",
    "rl_loss",
    "target_logprobs",
]
