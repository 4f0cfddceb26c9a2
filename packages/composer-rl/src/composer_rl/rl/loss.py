"""The RL loss: a forward's outputs and a packed batch's records -> a scalar and metrics.

`rl_loss` never calls the model and knows nothing of parallelism (prime-rl's `loss.py`,
torchtitan's `components/loss.py`): the RL step (`composer_rl.rl.trainer`) runs the
router-replayed forward of the policy (and the frozen reference's) on this rank's positions
of the packed row, and hands the outputs here with `RLTargets`, the batch's per-token
records at the same positions. The loss is the report's objective (`algorithm`) on the
policy's log-probabilities, plus MTP self-distillation on the tokens the policy sampled
(weighted) and, optionally, the SFT anchor's loss on stage-one demonstrations.

Every normaliser is the whole batch's (`GlobalBatch`): sequences for the policy-gradient
term, sampled tokens for the per-token mean metrics, each depth's targets for MTP, drafted
positions for the MTP acceptance. In one process they are this batch's own counts; a data-
or context-parallel rank's loss and metrics are then its shares of the whole batch's, which
the training step sums over the ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict, Field

from composer_model import Labels, LossOutput, ModelOutput
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
    """The whole RL batch's counts, which normalise every rank's share of the loss.

    `num_sequences` (x `normalizer_tokens`) divides the policy-gradient sum,
    `sampled_tokens` weights the per-token mean metrics by a rank's share of the sampled
    tokens, `mtp_targets` (one count a depth) divides the MTP self-distillation sums, and
    `drafted` (positions whose token and next token were both sampled) the accepted MTP
    drafts, so that summing every rank's loss and metrics gives the one-process values on
    the whole batch."""

    num_sequences: int
    sampled_tokens: int
    mtp_targets: tuple[int, ...] = ()
    drafted: int = 0


def drafted_positions(target_mask: torch.Tensor) -> torch.Tensor:
    """Positions t whose targets t+1 and t+2 were both sampled: where a first-depth MTP
    draft (token t+2) is scored against the main head's next choice. A document's last
    position is never a target, so this never pairs two documents."""
    mask = target_mask.reshape(-1).bool()
    return mask & torch.roll(mask, -1)


def global_batch_of(batch: PackedBatch, mtp_depths: int) -> GlobalBatch:
    """The `GlobalBatch` of a packed row of every trajectory of the step."""
    sampled = torch.roll(batch.target_mask, 1)
    counts = target_counts(batch.input_ids, batch.cu_seqlens, mtp_depths, sampled)
    return GlobalBatch(
        num_sequences=batch.num_sequences,
        sampled_tokens=int(batch.target_mask.sum()),
        mtp_targets=tuple(counts[1:]),
        drafted=int(drafted_positions(batch.target_mask).sum()),
    )


@dataclass(frozen=True)
class RLTargets:
    """What `rl_loss` compares a forward's outputs with: a packed batch's per-token records
    at the positions the outputs cover (the whole row in one process, this rank's shard
    under context parallelism; entry t describes token t+1, as `batch.pack` lays them out),
    and the whole batch's counts."""

    next_ids: torch.Tensor  # token t+1, whose log-probability position t gives
    target_mask: torch.Tensor  # the policy sampled token t+1
    behaviour_logp: torch.Tensor  # its log-probability under the policy that sampled it
    advantages: torch.Tensor
    drafted: torch.Tensor  # `drafted_positions`: where MTP acceptance is scored
    whole: GlobalBatch
    mtp: Labels | None = None  # self-distillation on the sampled tokens, teachers included


@dataclass
class RLLoss:
    """What `train_step` backpropagates, with the step's metrics."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def target_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    next_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """log pi(token t + 1 | ..t) at every position t of a packed row ([1, T, V] -> [T]).

    The next token of each position is `next_ids` when given (a context-parallel shard's
    next tokens may sit on another rank), else the roll of the whole row's `input_ids`."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    if temperature != 1.0:
        flat = flat / temperature
    if next_ids is None:
        if input_ids is None:
            raise ValueError("target_logprobs needs input_ids (a whole row) or next_ids")
        next_ids = torch.roll(input_ids.reshape(-1), -1)
    return torch.log_softmax(flat, dim=-1).gather(1, next_ids.reshape(-1)[:, None]).squeeze(1)


def mtp_accepted(
    draft_logits: torch.Tensor, verify_logits: torch.Tensor, drafted: torch.Tensor
) -> int:
    """How many `drafted` positions' first-MTP-head greedy draft equals the main head's
    greedy choice one position later (`verify_logits`: the main logits one ahead, the
    self-distillation teacher of depth 1): what greedy speculative decoding would accept."""
    vocab = draft_logits.shape[-1]
    draft = draft_logits.reshape(-1, vocab).argmax(-1)
    verify = verify_logits.reshape(-1, vocab).argmax(-1)
    return int((draft == verify)[drafted.reshape(-1)].sum())


def rl_loss(
    output: ModelOutput,
    targets: RLTargets,
    config: RLLossConfig,
    *,
    reference: ModelOutput | None = None,
    anchor: LossOutput | None = None,
) -> RLLoss:
    """The report's RL loss on a forward's `output`, plus MTP self-distillation (weighted).

    `reference`: the frozen reference's forward on the same positions (k1/k3, and the KL
    penalty when `kl_coef` > 0). `anchor`: SFT's loss on the step's demonstration rows
    (`composer_model.compute_loss` on their forward), added ``anchor_weight`` times. The
    loss and metrics are this batch's share of `targets.whole` (all of it in one process).
    """
    whole = targets.whole
    logp = target_logprobs(output.logits, temperature=config.temperature, next_ids=targets.next_ids)
    ref_logp = None
    if reference is not None:
        ref_logp = target_logprobs(
            reference.logits.detach(), temperature=config.temperature, next_ids=targets.next_ids
        )
    terms = rl_objective(
        logp,
        targets.behaviour_logp,
        targets.advantages,
        targets.target_mask,
        normalizer=float(whole.num_sequences * config.normalizer_tokens),
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
        # second moments, the additive form of the variances (`whole_batch_metrics`)
        "kl_k1_sq": terms.k1_var + terms.k1_mean**2,
        "kl_k3_sq": terms.k3_var + terms.k3_mean**2,
        "logprob_mismatch": terms.mismatch_mean,
        "replay_replacements": float(output.replacements),
    }
    # per-token means -> this batch's token-weighted share of the whole batch's
    share = terms.tokens / max(1, whole.sampled_tokens)
    for key in MEAN_METRICS:
        metrics[key] *= share
    if config.mtp_weight > 0 and output.mtp_logits:
        # Self-distillation onto the main head on the tokens the policy sampled.
        labels = targets.mtp
        if labels is None or not labels.teachers:
            raise ValueError(
                "the forward ran MTP but the targets carry no self-distillation labels "
                "(RLTargets.mtp with teachers): make them with composer_rl.rl.trainer.rl_targets"
            )
        extra = mtp_loss(output, labels, "self_distill")
        accepted = mtp_accepted(output.mtp_logits[0].detach(), labels.teachers[0], targets.drafted)
        loss = loss + config.mtp_weight * extra
        metrics["mtp_loss"] = float(extra.detach())
        metrics["mtp_acceptance"] = accepted / max(1, whole.drafted)
    if anchor is not None and config.anchor_weight > 0:
        loss = loss + config.anchor_weight * anchor.loss
        metrics["anchor_loss"] = float(anchor.loss.detach())
    return RLLoss(loss=loss, metrics=metrics)


MEAN_METRICS = ("is_capped_share", "kl_k1", "kl_k3", "logprob_mismatch", "kl_k1_sq", "kl_k3_sq")
"""Metrics that are means over the sampled tokens (weighted by a rank's token share)."""


def whole_batch_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The step's metrics from its parts' summed shares (micro-batches, ranks): each KL
    estimator's per-token variance over the whole batch, from its summed second moment and
    mean (variances of parts do not add; second moments weighted by token share do)."""
    out = dict(metrics)
    for name in ("kl_k1", "kl_k3"):
        if f"{name}_sq" in out:
            out[f"{name}_var"] = max(0.0, out.pop(f"{name}_sq") - out.get(name, 0.0) ** 2)
    return out


__all__ = [
    "MEAN_METRICS",
    "GlobalBatch",
    "RLLoss",
    "RLLossConfig",
    "RLTargets",
    "drafted_positions",
    "global_batch_of",
    "mtp_accepted",
    "rl_loss",
    "target_logprobs",
    "whole_batch_metrics",
]
