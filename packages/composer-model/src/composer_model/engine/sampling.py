"""Sampling parameters and the per-token sampling rule (temperature, top-k, top-p, seed).

The log-probability reported for a sampled token is under the distribution it was actually
drawn from (after temperature and truncation): that is the behaviour policy an RL trainer
needs for importance weights. Greedy decoding reports the model's plain log-softmax.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=1.0, ge=0.0, description="0 means greedy.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0, description="0 disables top-k.")
    max_new_tokens: int = Field(default=256, ge=1)
    stop: list[str] = Field(
        default_factory=list, description="Stop strings (the text is cut before them)."
    )
    stop_token_ids: list[int] | None = Field(
        default=None, description="Defaults to the tokenizer's <|endoftext|> and <|end_of_turn|>."
    )
    seed: int | None = None
    return_routing: bool = False


def sampling_logprobs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Log-probabilities [V] of the distribution `params` samples from (fp32, or fp64 logits' own).

    Rounding float64 logits to fp32 here would turn 1e-15 differences between two batch
    layouts into 1-ulp fp32 differences in the reported logprob.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if params.temperature == 0.0:
        return torch.log_softmax(logits, dim=-1)
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = logits.topk(params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = logits.sort(descending=True)
        probs = sorted_logits.softmax(-1)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        drop = probs.cumsum(-1) - probs >= params.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)
    return torch.log_softmax(logits, dim=-1)


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[int, float]:
    """One token and its log-probability under the sampling distribution."""
    logprobs = sampling_logprobs(logits.cpu(), params)  # the generators live on the CPU
    if params.temperature == 0.0:
        token = int(logprobs.argmax())
    else:
        token = int(torch.multinomial(logprobs.exp(), 1, generator=generator))
    return token, float(logprobs[token])
