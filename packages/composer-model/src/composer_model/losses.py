"""Training losses: next-token cross-entropy and the MTP objectives, on a forward's outputs.

This is the one loss of the project: the stage-one phases (pretraining, long context, SFT),
the training service and evaluation all compute it here, so the LM term, the MTP term and
the masking cannot drift apart between them.

A loss here never runs the model and knows nothing of parallelism (as torchtitan's
`components/loss.py`): it takes a forward's `ModelOutput` and the `Labels` to compare it
with, position for position. The training step (`composer_model.training`) runs the
forward and makes the labels; under context parallelism both cover only this rank's
shard of the row, and the labels were computed on the whole row first.

In a packed row the token after the last token of a document belongs to the next document,
so it is never a target: `document_targets` masks every shift that would cross a boundary.
A loss mask (SFT: the model's own tokens, not the prompt or tool output) says which tokens
are targets; it applies to the LM term and to every MTP depth alike (`target_ids`).

MTP depth k at position t predicts token t+k+1. Two targets:
- `next_next`: cross-entropy against that token (DeepSeek-V3);
- `self_distill`: KL from the main head's detached distribution at position t+k (which
  predicts the same token: the label's *teacher*) to the MTP head's, as Composer 2 trains
  its MTP layers. The main model is not pulled towards its drafts; only the MTP module
  (and, through its input, the hidden states it reads) learns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from composer_model.model import ModelOutput, document_ids

IGNORE = -100


def document_targets(flat_ids: torch.Tensor, cu_seqlens: torch.Tensor, shift: int) -> torch.Tensor:
    """targets[t] = flat_ids[t + shift] if that token is in t's document, else IGNORE."""
    total = flat_ids.numel()
    doc = document_ids(cu_seqlens, total)
    ahead = torch.arange(total, device=flat_ids.device) + shift
    inside = ahead < total
    clamped = ahead.clamp(max=total - 1)
    valid = inside & (doc[clamped] == doc)
    return torch.where(valid, flat_ids[clamped], torch.full_like(flat_ids, IGNORE))


def target_ids(
    input_ids: torch.Tensor,
    cu_seqlens: torch.Tensor,
    shift: int,
    loss_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """targets[t] = the token `shift` ahead of t, IGNORE across a document boundary or where
    `loss_mask` (one bool per token: is this token a target?) leaves that token out."""
    flat = input_ids.reshape(-1)
    targets = document_targets(flat, cu_seqlens, shift)
    if loss_mask is None:
        return targets
    mask = loss_mask.reshape(-1)
    if mask.shape != flat.shape:
        raise ValueError(
            f"loss_mask has {mask.numel()} entries for {flat.numel()} tokens; give one bool "
            "per input token (True: the token is a target)"
        )
    wanted = torch.roll(mask.bool(), -shift)  # token t+shift is the target of position t
    return torch.where(wanted, targets, torch.full_like(targets, IGNORE))


def target_counts(
    input_ids: torch.Tensor,
    cu_seqlens: torch.Tensor,
    depths: int,
    loss_mask: torch.Tensor | None = None,
) -> list[int]:
    """How many targets the LM term (shift 1) and each MTP depth k (shift k+1) have.

    A data- or context-parallel rank computes these on the *whole* global batch and passes
    them as `denominators`, so its loss is its share of the global mean."""
    return [
        int((target_ids(input_ids, cu_seqlens, shift, loss_mask) != IGNORE).sum())
        for shift in range(1, depths + 2)
    ]


@dataclass
class Labels:
    """What a loss compares a forward's outputs with, one entry per position of the outputs
    (a whole packed row, or this rank's shard of one).

    `tokens[0]` is the token after each position (the next-token term) and `tokens[k]` the
    token k+1 ahead (MTP depth k), IGNORE where there is none: across a document boundary,
    or where the loss mask leaves that token out (`target_ids`). `teachers[k-1]` is the main
    head's logits at position t+k, detached: self-distillation's target for depth k (None
    when no depth self-distills). `denominators` divide each term's sum (LM, then each
    depth; a data- or context-parallel rank passes the whole batch's `target_counts`, so
    the ranks' terms add up to the global mean); None divides by these labels' own counts.
    """

    tokens: list[torch.Tensor]
    teachers: list[torch.Tensor] | None = None
    denominators: Sequence[int] | None = None

    @property
    def depths(self) -> int:
        """How many MTP depths these labels cover."""
        return len(self.tokens) - 1


def lm_loss(
    logits: torch.Tensor, targets: torch.Tensor, denominator: int | None = None
) -> torch.Tensor:
    """Next-token cross-entropy of `logits` ([..., V], one row a position) against
    `targets` (one id a position, IGNORE where none): the mean over the targets, or the sum
    divided by `denominator` (the global batch's count, under data parallelism)."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    targets = targets.reshape(-1)
    if denominator is None:
        return F.cross_entropy(flat, targets, ignore_index=IGNORE)
    summed = F.cross_entropy(flat, targets, ignore_index=IGNORE, reduction="sum")
    return summed / max(1, denominator)


def mtp_loss(output: ModelOutput, labels: Labels, target: str = "self_distill") -> torch.Tensor:
    """Mean over MTP depths of the chosen objective (zero when the output has no MTP logits).

    Depth k at position t predicts `labels.tokens[k]` (token t+k+1, so a loss mask applies
    as to the LM term); `labels.denominators[k]` divides depth k's summed term instead of
    its count. Self-distillation reads `labels.teachers` (required)."""
    if target not in ("next_next", "self_distill"):
        raise ValueError(f"unknown MTP target {target!r}; use 'next_next' or 'self_distill'")
    if not output.mtp_logits:
        return output.logits.new_zeros(())
    if labels.depths < len(output.mtp_logits):
        raise ValueError(
            f"the output has {len(output.mtp_logits)} MTP depths, the labels {labels.depths}"
        )
    if target == "self_distill" and (
        labels.teachers is None or len(labels.teachers) < len(output.mtp_logits)
    ):
        raise ValueError(
            "self-distillation needs labels.teachers (the main head's logits k ahead, one "
            "tensor a depth): make the labels with composer_model.training.step_labels"
        )
    vocab = output.logits.shape[-1]
    losses = []
    for k, logits in enumerate(output.mtp_logits, start=1):
        logits = logits.reshape(-1, vocab).float()
        depth_targets = labels.tokens[k].reshape(-1)
        valid = depth_targets != IGNORE
        if not bool(valid.any()):  # nothing to predict at this depth: no signal, not NaN
            losses.append(logits.sum() * 0.0)
            continue
        denominators = labels.denominators
        count = int(valid.sum()) if denominators is None else max(1, denominators[k])
        if target == "next_next":
            summed = F.cross_entropy(logits, depth_targets, ignore_index=IGNORE, reduction="sum")
        else:
            assert labels.teachers is not None
            teacher = labels.teachers[k - 1].reshape(-1, vocab).detach().float()[valid]
            student = F.log_softmax(logits[valid], dim=-1)
            summed = F.kl_div(student, F.log_softmax(teacher, -1), log_target=True, reduction="sum")
        losses.append(summed / count)
    return torch.stack(losses).mean()


@dataclass
class LossOutput:
    loss: torch.Tensor  # what to backpropagate
    lm_loss: torch.Tensor
    mtp_loss: torch.Tensor
    output: ModelOutput

    @property
    def metrics(self) -> dict[str, float]:
        """The terms as floats, for logging (what `composer_model.training.train_step` reports)."""
        return {
            "loss": float(self.loss.detach()),
            "lm_loss": float(self.lm_loss.detach()),
            "mtp_loss": float(self.mtp_loss.detach()),
        }


def compute_loss(
    output: ModelOutput,
    labels: Labels,
    *,
    mtp_weight: float = 0.0,
    mtp_target: str = "self_distill",
) -> LossOutput:
    """LM loss + `mtp_weight` x MTP loss of a forward's `output` against `labels`.

    The project's one loss. It never calls the model: the training step runs the forward
    (`composer_model.training.lm_forward_loss`, which also resolves the model config's
    `mtp_loss_weight` and `mtp_target`) and hands its outputs here. A weight of 0, or an
    output without MTP logits, gives a zero MTP term.
    """
    if mtp_weight < 0:
        raise ValueError(f"mtp_weight must be >= 0, got {mtp_weight}")
    denominators = labels.denominators
    main = lm_loss(
        output.logits, labels.tokens[0], None if denominators is None else denominators[0]
    )
    extra = (
        mtp_loss(output, labels, mtp_target)
        if mtp_weight > 0 and output.mtp_logits
        else main.new_zeros(())
    )
    return LossOutput(loss=main + mtp_weight * extra, lm_loss=main, mtp_loss=extra, output=output)


__all__ = [
    "IGNORE",
    "Labels",
    "LossOutput",
    "compute_loss",
    "document_targets",
    "lm_loss",
    "mtp_loss",
    "target_counts",
    "target_ids",
]
