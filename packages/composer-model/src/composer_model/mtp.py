"""Multi-token prediction modules, wired as in DeepSeek-V3.

Module k (k = 1..D) at position t combines the embedding of token t+k with the hidden state
that depth k-1 produced at t (the main model's for k = 1):

    h_k[t] = Block_k(eh_proj([enorm(embed(x[t+k])), hnorm(h_{k-1}[t])]))
    logits_k[t] = lm_head(shared_head.norm(h_k[t]))   -> predicts x[t+k+1]

The embedding and the output head are the main model's (shared, not copied). The block
attends causally within each packed document, so positions whose shifted token crosses a
document boundary are only ever seen by positions that are themselves masked out of the loss.
"""

from __future__ import annotations

import torch
from torch import nn

from composer_model.config import ModelConfig
from composer_model.layers.attention import LatentCache
from composer_model.layers.block import DecoderLayer
from composer_model.layers.norm import RMSNorm


class SharedHead(nn.Module):
    """Holds only the MTP module's final norm; the head matrix is the main model's lm_head."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class MTPModule(nn.Module):
    def __init__(self, config: ModelConfig, depth: int) -> None:
        super().__init__()
        self.depth = depth
        self.enorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hnorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        # Same layer index as in the HF checkpoint (after the main layers), hence an MoE block.
        self.layer = DecoderLayer(config, config.num_hidden_layers + depth)
        self.shared_head = SharedHead(config)

    def combine(self, hidden: torch.Tensor, shifted_embeds: torch.Tensor) -> torch.Tensor:
        return self.eh_proj(torch.cat([self.enorm(shifted_embeds), self.hnorm(hidden)], dim=-1))

    def forward(
        self,
        hidden: torch.Tensor,
        shifted_embeds: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
        cache: LatentCache | None = None,
        new_lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The depth's hidden state (pre-norm), packed [N, H] or cached [B, n, H]."""
        x = self.combine(hidden, shifted_embeds)
        out, _ = self.layer(
            x, cos, sin, cu_seqlens=cu_seqlens, cache=cache, new_lengths=new_lengths
        )
        return out
