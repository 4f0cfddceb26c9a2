"""The RL objective on the policy: a router-replayed forward, the algorithm, MTP self-distillation.

`rl_loss` is what the training service hands to the project's one training step as its loss
callable, so RL shares clipping, Adam, the balancing-bias update, checkpoints and publishing
with pretraining and SFT. The forward replays the experts the inference engine chose for
every token (router replay, with the plausibility guard), so the trainer's log-probabilities
are those of the network that sampled; the mismatch that remains is a metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict, Field

from composer_model import ComposerModel
from composer_model.losses import mtp_loss, target_counts
from composer_rl.rl.algorithm import KLEstimator, rl_objective
from composer_rl.rl.batch import PackedBatch


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
    kl_estimator: KLEstimator = "k1"
    kl_metrics: bool = Field(
        default=True, description="run the reference forward for k1/k3 metrics even at beta 0"
    )
    normalizer_tokens: int = Field(
        default=1024,
        ge=1,
        description="loss = sum over tokens / (sequences x this constant); no per-sequence "
        "length normalisation",
    )
    router_replay: bool = True
    replay_guard: float | None = Field(
        default=0.1,
        gt=0,
        le=1,
        description="plausibility guard: a replayed expert scoring below this fraction of the "
        "router's own k-th score is replaced; None replays verbatim",
    )
    mtp_weight: float = Field(
        default=0.1, ge=0, description="MTP self-distillation on the policy's own tokens"
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


@dataclass
class RLLoss:
    """What `train_step` backpropagates, with the step's metrics."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def target_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float
) -> torch.Tensor:
    """log pi(token t + 1 | ..t) at every position t of a packed row ([1, T, V] -> [T])."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    if temperature != 1.0:
        flat = flat / temperature
    nxt = torch.roll(input_ids.reshape(-1), -1)
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
) -> RLLoss:
    """The report's RL loss on one packed batch, plus MTP self-distillation (weighted).

    `whole` (a data-parallel rank: `batch` is its share): the loss and the metrics become
    this rank's shares of the whole batch's (see `GlobalBatch`); the training step sums
    them over the ranks."""
    replay = batch.routing if config.router_replay else None
    want_mtp = config.mtp_weight > 0 and bool(model.mtp_modules)
    output = model(
        batch.input_ids,
        cu_seqlens=batch.cu_seqlens,
        replay_indices=replay,
        replay_guard=config.replay_guard if replay is not None else None,
        return_mtp=want_mtp,
    )
    logp = target_logprobs(output.logits, batch.input_ids, config.temperature)
    ref_logp = None
    if reference is not None and (config.kl_coef > 0 or config.kl_metrics):
        with torch.no_grad():
            ref_out = reference(batch.input_ids, cu_seqlens=batch.cu_seqlens, replay_indices=replay)
            ref_logp = target_logprobs(ref_out.logits, batch.input_ids, config.temperature)
    terms = rl_objective(
        logp,
        batch.behaviour_logp,
        batch.advantages,
        batch.target_mask,
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
        "logprob_mismatch": terms.mismatch_mean,
        "replay_replacements": float(output.replacements),
    }
    if want_mtp and output.mtp_logits:
        # Self-distillation onto the main head on the tokens the policy sampled.
        sampled = torch.roll(batch.target_mask, 1)
        extra = mtp_loss(
            output,
            batch.input_ids,
            "self_distill",
            loss_mask=sampled,
            denominators=None if whole is None else whole.mtp_targets,
        )
        loss = loss + config.mtp_weight * extra
        metrics["mtp_loss"] = float(extra.detach())
        metrics["mtp_acceptance"] = mtp_acceptance(
            output.logits.detach(), output.mtp_logits[0].detach(), batch.target_mask
        )
    if whole is not None:  # per-token means -> this rank's token-weighted share
        share = terms.tokens / max(1, whole.sampled_tokens)
        for key in MEAN_METRICS:
            if key in metrics:
                metrics[key] *= share
    return RLLoss(loss=loss, metrics=metrics)


MEAN_METRICS = ("is_capped_share", "kl_k1", "kl_k3", "logprob_mismatch", "mtp_acceptance")
"""Metrics that are means over the sampled tokens (weighted by token share under dp; the
share of `mtp_acceptance` is by sampled tokens, an approximation of its own count)."""


__all__ = [
    "GlobalBatch",
    "RLLoss",
    "RLLossConfig",
    "global_batch_of",
    "mtp_acceptance",
    "rl_loss",
    "target_logprobs",
]
