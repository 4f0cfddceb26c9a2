"""Training losses: next-token cross-entropy and the MTP objectives, document-aware.

In a packed row the token after the last token of a document belongs to the next document,
so it is never a target: `document_targets` masks every shift that would cross a boundary.

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


def lm_loss(output: ModelOutput, input_ids: torch.Tensor) -> torch.Tensor:
    logits = output.logits.reshape(-1, output.logits.shape[-1])
    targets = document_targets(input_ids.reshape(-1), output.cu_seqlens, 1)
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE)


def mtp_loss(
    output: ModelOutput, input_ids: torch.Tensor, target: str = "self_distill"
) -> torch.Tensor:
    """Mean over MTP depths of the chosen objective (zero when the model has no MTP)."""
    if not output.mtp_logits:
        return output.logits.new_zeros(())
    flat_ids = input_ids.reshape(-1)
    vocab = output.logits.shape[-1]
    main = output.logits.reshape(-1, vocab).detach().float()
    losses = []
    for k, logits in enumerate(output.mtp_logits, start=1):
        logits = logits.reshape(-1, vocab).float()
        targets = document_targets(flat_ids, output.cu_seqlens, k + 1)
        valid = targets != IGNORE
        if target == "next_next":
            losses.append(F.cross_entropy(logits, targets, ignore_index=IGNORE))
        elif target == "self_distill":
            teacher = torch.roll(main, -k, dims=0)[valid]  # main head at t+k predicts t+k+1
            student = F.log_softmax(logits[valid], dim=-1)
            losses.append(
                F.kl_div(
                    student, F.log_softmax(teacher, -1), log_target=True, reduction="batchmean"
                )
            )
        else:
            raise ValueError(f"unknown MTP target {target!r}; use 'next_next' or 'self_distill'")
    return torch.stack(losses).mean()


@dataclass
class LossOutput:
    loss: torch.Tensor  # what to backpropagate
    lm_loss: torch.Tensor
    mtp_loss: torch.Tensor
    output: ModelOutput


def compute_loss(
    model: ComposerModel,
    input_ids: torch.Tensor,
    positions: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    replay_indices: Sequence[torch.Tensor] | None = None,
    mtp_weight: float | None = None,
    mtp_target: str | None = None,
) -> LossOutput:
    """LM loss + weight x MTP loss for one (packed) batch; defaults come from the model config."""
    weight = model.config.mtp_loss_weight if mtp_weight is None else mtp_weight
    want_mtp = weight > 0 and bool(model.mtp_modules)
    output = model(
        input_ids,
        positions=positions,
        cu_seqlens=cu_seqlens,
        replay_indices=replay_indices,
        return_mtp=want_mtp,
    )
    main = lm_loss(output, input_ids)
    extra = (
        mtp_loss(output, input_ids, mtp_target or model.config.mtp_target)
        if want_mtp
        else main.new_zeros(())
    )
    return LossOutput(loss=main + weight * extra, lm_loss=main, mtp_loss=extra, output=output)


__all__ = ["IGNORE", "LossOutput", "compute_loss", "document_targets", "lm_loss", "mtp_loss"]
