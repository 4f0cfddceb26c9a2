"""The MLA latent cache: per sequence slot, per layer, the normalised c_kv and rotated rope key.

That is `kv_lora_rank + qk_rope_head_dim` numbers per token per layer (576 for DeepSeek-V3,
against 2 x 128 heads x 192 = 49,152 for the expanded keys and values), which is the point of
MLA. Slots are rows of one buffer per layer; sequences join and leave by taking and returning
slots, so continuous batching never copies another sequence's cache.
"""

from __future__ import annotations

import torch

from composer_model.layers.attention import latent_attention_mask


class LatentKVCache:
    def __init__(
        self,
        num_layers: int,
        width: int,
        max_slots: int,
        dtype: torch.dtype,
        device: torch.device,
        layer_offset: int = 0,
        initial_capacity: int = 64,
        max_capacity: int | None = None,
    ) -> None:
        self.width = width
        self.layer_offset = layer_offset
        self.max_capacity = max_capacity
        self.buffers = [
            torch.zeros(max_slots, initial_capacity, width, dtype=dtype, device=device)
            for _ in range(num_layers)
        ]
        self.lengths = torch.zeros(max_slots, dtype=torch.long, device=device)
        self._free = list(range(max_slots - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return self.buffers[0].shape[1]

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError(
                "no free cache slot: the engine admitted more sequences than max_batch_size"
            )
        slot = self._free.pop()
        self.lengths[slot] = 0
        return slot

    def free(self, slot: int) -> None:
        self.lengths[slot] = 0
        self._free.append(slot)

    def truncate(self, slot: int, length: int) -> None:
        """Forget everything after `length` tokens (rejected speculative tokens)."""
        self.lengths[slot] = min(int(self.lengths[slot]), length)

    def reserve(self, needed: int) -> None:
        """Grow every buffer (doubling) so that `needed` tokens fit in one slot."""
        if self.max_capacity is not None and needed > self.max_capacity:
            raise ValueError(
                f"sequence needs {needed} cached tokens; the engine allows {self.max_capacity}"
            )
        capacity = self.capacity
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= 2
        for i, buf in enumerate(self.buffers):
            grown = buf.new_zeros(buf.shape[0], capacity, buf.shape[2])
            grown[:, : buf.shape[1]] = buf
            self.buffers[i] = grown

    def view(self, slots: torch.Tensor, new_lengths: torch.Tensor) -> BatchView:
        self.reserve(int((self.lengths[slots] + new_lengths).max()))
        return BatchView(self, slots, new_lengths)

    def advance(self, slots: torch.Tensor, new_lengths: torch.Tensor) -> None:
        self.lengths[slots] += new_lengths


class BatchView:
    """The `LatentCache` protocol for one forward over a batch of slots."""

    def __init__(
        self, cache: LatentKVCache, slots: torch.Tensor, new_lengths: torch.Tensor
    ) -> None:
        self.cache = cache
        self.slots = slots
        self.new_lengths = new_lengths
        self.past_lengths = cache.lengths[slots].clone()
        self.past_max = int(self.past_lengths.max()) if len(slots) else 0
        # Computed by the first layer, reused by the others (they all see the same shapes).
        self._mask: tuple[int, int, torch.Tensor] | None = None
        self._write_index: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def mask(self, past_len: int, n: int) -> torch.Tensor:
        if self._mask is None or self._mask[:2] != (past_len, n):
            mask = latent_attention_mask(self.past_lengths, past_len, self.new_lengths, n)
            self._mask = (past_len, n, mask)
        return self._mask[2]

    def read(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        buf = self.cache.buffers[layer_idx - self.cache.layer_offset]
        return buf[self.slots, : self.past_max], self.past_lengths

    def write(self, layer_idx: int, latents: torch.Tensor) -> None:
        buf = self.cache.buffers[layer_idx - self.cache.layer_offset]
        n = latents.shape[1]
        if self._write_index is None or self._write_index[0] != n:
            steps = torch.arange(n, device=latents.device)
            valid = steps[None, :] < self.new_lengths[:, None]
            rows = self.slots[:, None].expand(-1, n)[valid]
            cols = (self.past_lengths[:, None] + steps[None, :])[valid]
            self._write_index = (n, valid, rows, cols)
        _, valid, rows, cols = self._write_index
        buf[rows, cols] = latents[valid].to(buf.dtype)
