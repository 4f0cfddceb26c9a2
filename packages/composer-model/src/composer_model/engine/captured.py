"""The engine's decode step as one captured graph (torch.compile), with an eager fallback.

At the sizes RL runs on a CPU (and at any size on a GPU's small decode batches), a decode
step is bound by per-op overhead, not by FLOPs: the eager step is ~25 small ops a layer,
each a Python call and a dispatcher round trip. Inductor fuses them into a few kernels and
calls the matmuls directly: on the `tiny` preset greedy decode goes from 1.15x to 3.8x
transformers' at batch 1 and from 1.4x to 1.9x at batch 32 (the package README's table).

Only the one-new-token step is captured; prefill and speculative verification stay eager,
because their shapes vary with every prompt. The captured step runs the model's own
`forward_cached` against a cache view with no Python-side state, so there is one definition
of the model's math; the MoE layer switches to its static-shape dispatch while compiling.
Shapes are marked dynamic (batch and cached length), so a run compiles twice (batch 1 is
specialised), not once per length. Dynamo keeps a bounded number of compiled versions per
function (`torch._dynamo.config.recompile_limit`); each engine's model adds one, which
matters only to a process that builds many engines over many models (a test suite).

Anything that stops capture (no C++ compiler for inductor, an unsupported op, quantized
experts) is logged once and the engine goes on eagerly with the same results: the compile
is a speed-up, never a requirement.
"""

from __future__ import annotations

import logging

import torch

from composer_model.layers.attention import latent_attention_mask
from composer_model.model import ComposerModel

logger = logging.getLogger(__name__)


class DecodeView:
    """The `LatentCache` protocol for one new token per sequence, with no cached Python state.

    Reads copy only the first `key_len` cached positions of the batch's slots; the write puts
    each sequence's new latent at its own length. Nothing is memoised on the object (a
    captured graph must not depend on Python attributes it mutates).
    """

    def __init__(
        self,
        buffers: list[torch.Tensor],
        slots: torch.Tensor,
        past_lengths: torch.Tensor,
        key_len: int,
    ) -> None:
        self.buffers = buffers
        self.slots = slots
        self.past_lengths = past_lengths
        self.key_len = key_len

    def read(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        past = self.buffers[layer_idx][:, : self.key_len].index_select(0, self.slots)
        return past, self.past_lengths

    def write(self, layer_idx: int, latents: torch.Tensor) -> None:
        buf = self.buffers[layer_idx]
        buf.index_put_((self.slots, self.past_lengths), latents[:, 0].to(buf.dtype))

    def mask(self, past_len: int, n: int) -> torch.Tensor:
        ones = torch.ones_like(self.past_lengths)
        return latent_attention_mask(self.past_lengths, past_len, ones, n)


def decode_step(
    model: ComposerModel,
    input_ids: torch.Tensor,
    slots: torch.Tensor,
    past_lengths: torch.Tensor,
    buffers: list[torch.Tensor],
    key_len: int,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """One token [B] after each slot's cached `past_lengths` [B]: logits [B, 1, V], hidden, routing."""
    view = DecodeView(buffers, slots, past_lengths, key_len)
    logits, hidden, routing = model.forward_cached(
        input_ids[:, None],
        past_lengths[:, None],
        torch.ones_like(input_ids),
        view,
        return_routing=True,
    )
    return logits, hidden, [r.indices for r in routing]


class CapturedDecode:
    """`decode_step` compiled once per engine; `None` from `__call__` means "run eagerly"."""

    def __init__(self, model: ComposerModel) -> None:
        self.model = model
        self.failure: str | None = None
        # `update_weights` copies in place, so the captured graph reads the new values.
        self._compiled = torch.compile(decode_step, dynamic=True, fullgraph=True)

    @property
    def active(self) -> bool:
        return self.failure is None

    def __call__(
        self,
        input_ids: torch.Tensor,
        slots: torch.Tensor,
        past_lengths: torch.Tensor,
        key_len: int,
        buffers: list[torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]] | None:
        """`key_len` is `past_lengths.max()`, which the caller already holds on the host."""
        if self.failure is not None:
            return None
        try:
            return self._compiled(self.model, input_ids, slots, past_lengths, buffers, key_len)
        except Exception as error:  # any capture failure: fall back, say why once
            first_line = (str(error).strip().splitlines() or [""])[0][:300]
            self.failure = f"{type(error).__name__}: {first_line}"
            logger.warning(
                "captured decode unavailable, decoding eagerly (same results, slower): %s",
                self.failure,
            )
            return None


__all__ = ["CapturedDecode", "DecodeView", "decode_step"]
