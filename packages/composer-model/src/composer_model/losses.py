"""Training losses: next-token cross-entropy and the MTP objectives, document-aware.

This is the one loss of the project: the stage-one phases (pretraining, long context, SFT),
the training service and evaluation all compute it here, so the LM term, the MTP term and
the masking cannot drift apart between them.

In a packed row the token after the last token of a document belongs to the next document,
so it is never a target: `document_targets` masks every shift that would cross a boundary.
A loss mask (SFT: the model's own tokens, not the prompt or tool output) says which tokens
are targets; it applies to the LM term and to every MTP depth alike (`target_ids`).

MTP depth k at position t predicts token t+k+1. Two targets:
- `next_next`: cross-entropy against that token (DeepSeek-V3);
- `self_distill`: KL from the main head's detached distribution at position t+k (which
  predicts the same token) to the MTP head's, as Composer 2 trains its MTP layers. The main
  model is not pulled towards its drafts; only the MTP module (and, through its input, the
  hidden states it reads) learns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from composer_model.model import ComposerModel, ModelOutput, document_ids

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


def lm_loss(
    output: ModelOutput,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor | None = None,
    *,
    targets: torch.Tensor | None = None,
    denominator: int | None = None,
) -> torch.Tensor:
    """Mean next-token cross-entropy over the targets (document- and mask-aware).

    `targets` (one id per token, IGNORE where none) replaces the targets computed from
    `input_ids`: a context-parallel rank holds a shard of the sequence, whose next tokens
    may sit on another rank, so they are computed on the whole sequence and sharded.
    `denominator` divides the summed cross-entropy instead of this batch's target count
    (the global batch's count, under data parallelism)."""
    logits = output.logits.reshape(-1, output.logits.shape[-1])
    if targets is None:
        targets = target_ids(input_ids, output.cu_seqlens, 1, loss_mask)
    if denominator is None:
        return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE)
    summed = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE, reduction="sum")
    return summed / max(1, denominator)


def mtp_loss(
    output: ModelOutput,
    input_ids: torch.Tensor,
    target: str = "self_distill",
    loss_mask: torch.Tensor | None = None,
    denominators: Sequence[int] | None = None,
    targets: Sequence[torch.Tensor] | None = None,
    teachers: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Mean over MTP depths of the chosen objective (zero when the model has no MTP).

    Depth k at position t predicts token t+k+1; with a `loss_mask` only positions whose
    token t+k+1 is a target count, as for the LM term. `denominators[k-1]` divides depth
    k's summed term instead of this batch's count (the global count, under data
    parallelism), so the ranks' terms add up to the global mean.

    A context-parallel shard passes, per depth, `targets` (token t+k+1, IGNORE where none)
    and `teachers` (the main head's logits at t+k, for self-distillation), both computed on
    the whole row and sharded, since both may lie on another rank.
    """
    if target not in ("next_next", "self_distill"):
        raise ValueError(f"unknown MTP target {target!r}; use 'next_next' or 'self_distill'")
    if not output.mtp_logits:
        return output.logits.new_zeros(())
    vocab = output.logits.shape[-1]
    main = output.logits.reshape(-1, vocab).detach().float()
    losses = []
    for k, logits in enumerate(output.mtp_logits, start=1):
        logits = logits.reshape(-1, vocab).float()
        depth_targets = (
            target_ids(input_ids, output.cu_seqlens, k + 1, loss_mask)
            if targets is None
            else targets[k - 1]
        )
        valid = depth_targets != IGNORE
        if not bool(valid.any()):  # nothing to predict at this depth: no signal, not NaN
            losses.append(logits.sum() * 0.0)
            continue
        count = int(valid.sum()) if denominators is None else max(1, denominators[k - 1])
        if target == "next_next":
            summed = F.cross_entropy(logits, depth_targets, ignore_index=IGNORE, reduction="sum")
        elif target == "self_distill":
            ahead = torch.roll(main, -k, dims=0) if teachers is None else teachers[k - 1]
            teacher = ahead.reshape(-1, vocab).detach().float()[valid]  # main head at t+k
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
    model: ComposerModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    replay_indices: Sequence[torch.Tensor] | None = None,
    mtp_weight: float | None = None,
    mtp_target: str | None = None,
    loss_mask: torch.Tensor | None = None,
    denominators: Sequence[int] | None = None,
) -> LossOutput:
    """LM loss + weight x MTP loss for one (packed) batch.

    `mtp_weight` and `mtp_target` default to the model config's (`mtp_loss_weight`,
    `mtp_target`); a weight of 0 skips the MTP forward. `loss_mask` (one bool per token,
    True where the token is a target; None: every token) masks the LM and MTP terms alike.

    For a rank of a data-parallel run (`composer_parallel.sharded_loss`): `denominators`
    (`target_counts` of the global batch: LM, then each MTP depth) make every term this
    rank's share of the global mean. (A context-parallel shard needs targets and teachers
    from the whole row: `sharded_loss` composes `lm_loss` and `mtp_loss` for it.)
    """
    weight = model.config.mtp_loss_weight if mtp_weight is None else mtp_weight
    if weight < 0:
        raise ValueError(f"mtp_weight must be >= 0, got {weight}")
    want_mtp = weight > 0 and bool(model.mtp_modules)
    output = model(
        input_ids,
        positions=positions,
        cu_seqlens=cu_seqlens,
        replay_indices=replay_indices,
        return_mtp=want_mtp,
    )
    main = lm_loss(
        output,
        input_ids,
        loss_mask,
        denominator=None if denominators is None else denominators[0],
    )
    extra = (
        mtp_loss(
            output,
            input_ids,
            mtp_target or model.config.mtp_target,
            loss_mask,
            denominators=None if denominators is None else denominators[1:],
        )
        if want_mtp
        else main.new_zeros(())
    )
    return LossOutput(loss=main + weight * extra, lm_loss=main, mtp_loss=extra, output=output)


__all__ = [
    "IGNORE",
    "LossOutput",
    "compute_loss",
    "document_targets",
    "lm_loss",
    "mtp_loss",
    "target_counts",
    "target_ids",
]
