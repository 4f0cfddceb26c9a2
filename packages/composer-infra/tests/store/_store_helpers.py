"""Shared helpers of the weight-store tests (a uniquely named module, not conftest:
several test folders of this package have a conftest, and `from conftest import` would
pick whichever was imported first)."""

from __future__ import annotations

import torch


def make_state(seed: int = 0, big: int = 0) -> dict[str, torch.Tensor]:
    """A small model-shaped state dict with mixed dtypes (bf16 weights, fp32 norms, int buffer)."""
    g = torch.Generator().manual_seed(seed)
    state = {
        "embed.weight": (torch.randn(64, 32, generator=g) * 0.02).to(torch.bfloat16),
        "layers.0.attn.weight": (torch.randn(32, 32, generator=g) * 0.02).to(torch.bfloat16),
        "layers.0.mlp.weight": (torch.randn(128, 32, generator=g) * 0.02).to(torch.bfloat16),
        "layers.0.norm.weight": torch.ones(32),
        "step_counter": torch.tensor([7], dtype=torch.int64),
        "scalar": torch.tensor(3.5, dtype=torch.float16),
    }
    if big:
        state["big.weight"] = torch.randn(big, generator=g).to(torch.bfloat16)
    return state


def train_step(
    state: dict[str, torch.Tensor], seed: int, frac: float = 0.05
) -> dict[str, torch.Tensor]:
    """A new version where a fraction of each floating tensor's elements moved."""
    g = torch.Generator().manual_seed(1000 + seed)
    out = {}
    for name, t in state.items():
        if t.is_floating_point() and t.dim() > 0:
            mask = torch.rand(t.shape, generator=g) < frac
            step = torch.randn(t.shape, generator=g).to(t.dtype) * 1e-2
            out[name] = torch.where(mask, t + step, t)
        else:
            out[name] = t.clone()
    return out


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        x, y = a[name], b[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)), name
