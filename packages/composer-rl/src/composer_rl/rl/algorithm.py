"""The RL algorithm as pure functions on tensors: advantages, KL estimators, importance weights, loss.

This is the whole objective of the report's RL stage, in the order a step applies it:

1. **Advantages** (Dr. GRPO): ``A_i = r_i - mean(r_group)``, no division by the group's
   standard deviation. An episode whose reward is missing because the infrastructure failed
   (sandbox crash, grader timeout) is left out of the baseline and gets no advantage: a
   broken machine must not teach the policy that its tokens were bad.
2. **KL in the reward**: the k1 estimator ``log pi(x) - log pi_ref(x)`` of each sampled
   token, detached and subtracted from that token's advantage, ``A_t = A - beta * k1_t``.
   Used as a differentiable loss, k1 has zero expected gradient on-policy; folded into the
   advantage it is the usual "KL penalty in the reward". k3 ``(r - 1) - log r`` with
   ``r = pi_ref / pi`` is computed and reported beside it (``rl_objective(kl_estimator="k3")``
   penalises with it instead) because the report's point is that k3's variance explodes
   as the policies diverge.
3. **Truncated importance sampling**: tokens were sampled by older versions (asynchrony,
   in-flight updates). Their gradient is weighted by ``min(pi_train / pi_behaviour, C)``,
   detached; the share of tokens at the cap is a metric.
4. **Policy-gradient loss**: ``-sum_t w_t * A_t * log pi(x_t)`` over every sampled token of
   the batch, divided by a constant (no per-sequence length normalisation, so a long
   episode is not worth less per token than a short one).

Everything here is deterministic and free of I/O so tests can check it against hand-computed
values; `composer_rl.rl.loss` applies it to the outputs of the router-replayed forward that
`composer_rl.rl.trainer` runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

KLEstimator = Literal["k1", "k3"]


@dataclass(frozen=True)
class GroupAdvantages:
    """Per-episode advantages of one group; None where the reward was missing."""

    advantages: list[float | None]
    baseline: float | None
    valid: int

    @property
    def constant(self) -> bool:
        """All valid rewards equal: the group carries no learning signal."""
        return all(a is None or a == 0.0 for a in self.advantages)


def group_advantages(rewards: Sequence[float | None]) -> GroupAdvantages:
    """Dr. GRPO advantages: reward minus the mean of the group's valid rewards.

    `None` marks an episode whose reward is missing through no fault of the policy; it is
    excluded from the baseline and gets advantage None (drop it from training).
    """
    valid = [float(r) for r in rewards if r is not None]
    if any(not math.isfinite(r) for r in valid):
        raise ValueError(f"rewards must be finite or None (missing); got {list(rewards)}")
    if not valid:
        return GroupAdvantages([None] * len(rewards), None, 0)
    baseline = math.fsum(valid) / len(valid)
    return GroupAdvantages(
        [None if r is None else float(r) - baseline for r in rewards], baseline, len(valid)
    )


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref per sampled token (unbiased for KL(pi || pi_ref), high variance sign)."""
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = (r - 1) - log r with r = pi_ref / pi (non-negative; variance explodes as pi leaves pi_ref)."""
    log_ratio = ref_logp - logp
    return torch.expm1(log_ratio) - log_ratio


def truncated_is_weights(
    train_logp: torch.Tensor, behaviour_logp: torch.Tensor, cap: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, capped) with weights = min(pi_train / pi_behaviour, cap), detached.

    `cap=None` turns the correction off (all weights 1). `capped` marks the tokens whose
    ratio exceeded the cap (their share is the `is_capped_share` metric).
    """
    if cap is None:
        ones = torch.ones_like(train_logp)
        return ones, torch.zeros_like(train_logp, dtype=torch.bool)
    if cap <= 0:
        raise ValueError(f"the importance-weight cap must be > 0 (or None for off); got {cap}")
    ratio = torch.exp(train_logp.detach() - behaviour_logp)
    capped = ratio > cap
    return ratio.clamp(max=cap), capped


def token_advantages(
    advantages: torch.Tensor, kl: torch.Tensor | None, kl_coef: float
) -> torch.Tensor:
    """A_t = A - beta * KL_t, detached: the KL penalty folded into the reward."""
    if kl is None or kl_coef == 0.0:
        return advantages.detach()
    return (advantages - kl_coef * kl).detach()


def policy_gradient_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    normalizer: float,
) -> torch.Tensor:
    """-sum(w * A * log pi * mask) / normalizer (a constant, not the token count)."""
    if normalizer <= 0:
        raise ValueError(f"the loss normalizer must be > 0; got {normalizer}")
    mask = mask.to(logp.dtype)
    return -(weights.detach() * advantages.detach() * logp * mask).sum() / normalizer


@dataclass
class RLTerms:
    """The loss and what it is made of, for metrics."""

    loss: torch.Tensor
    tokens: int
    is_capped_share: float
    k1_mean: float
    k3_mean: float
    k1_var: float  # per-token variance over the sampled tokens (the kl-estimators study)
    k3_var: float
    mismatch_mean: float  # mean |log pi_train - log pi_behaviour| over sampled tokens
    advantage_mean: float


def rl_objective(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    normalizer: float,
    is_cap: float | None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: KLEstimator = "k1",
) -> RLTerms:
    """Steps 2-4 above on token-aligned tensors (one entry per target token of a packed batch).

    `logp` carries the gradient; everything else is data. `mask` selects the tokens the policy
    sampled (prompt and tool-output tokens are context, not actions).
    """
    if not (logp.shape == behaviour_logp.shape == advantages.shape == mask.shape):
        raise ValueError(
            "logp, behaviour_logp, advantages and mask must have one shape; got "
            f"{tuple(logp.shape)}, {tuple(behaviour_logp.shape)}, {tuple(advantages.shape)}, "
            f"{tuple(mask.shape)}"
        )
    sel = mask.bool()
    count = int(sel.sum())
    weights, capped = truncated_is_weights(logp, behaviour_logp, is_cap)
    k1 = k3 = None
    if ref_logp is not None:
        k1 = kl_k1(logp.detach(), ref_logp)
        k3 = kl_k3(logp.detach(), ref_logp)
    penalty = (k1 if kl_estimator == "k1" else k3) if ref_logp is not None else None
    shaped = token_advantages(advantages, penalty, kl_coef)
    loss = policy_gradient_loss(logp, shaped, weights, sel, normalizer)

    def mean(x: torch.Tensor | None) -> float:
        return float(x[sel].float().mean()) if x is not None and count else 0.0

    def var(x: torch.Tensor | None) -> float:
        return float(x[sel].double().var(correction=0)) if x is not None and count else 0.0

    return RLTerms(
        loss=loss,
        tokens=count,
        is_capped_share=mean(capped),
        k1_mean=mean(k1),
        k3_mean=mean(k3),
        k1_var=var(k1),
        k3_var=var(k3),
        mismatch_mean=mean((logp.detach() - behaviour_logp).abs()),
        advantage_mean=mean(shaped),
    )


__all__ = [
    "GroupAdvantages",
    "KLEstimator",
    "RLTerms",
    "group_advantages",
    "kl_k1",
    "kl_k3",
    "policy_gradient_loss",
    "rl_objective",
    "token_advantages",
    "truncated_is_weights",
]
