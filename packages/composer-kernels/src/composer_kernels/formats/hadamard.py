"""Random Hadamard transform over blocks of 16, for NVFP4.

Multiplying each block of 16 values by R = diag(random signs) @ H16 / 4 (H16 the
Sylvester Hadamard matrix) spreads an outlier over the whole block, so the block's
scale is set by a typical magnitude rather than by one large value. R is orthogonal,
so applying it to both GEMM operands along the reduction dimension leaves the
product unchanged: (x R)(R^T w) = x w.
"""

from __future__ import annotations

import torch

HADAMARD_BLOCK = 16


def hadamard_matrix(n: int = HADAMARD_BLOCK) -> torch.Tensor:
    """The n x n Sylvester Hadamard matrix (entries ±1), n a power of two."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def random_hadamard_matrix(seed: int, n: int = HADAMARD_BLOCK) -> torch.Tensor:
    """Orthogonal float32 matrix diag(s) @ H / sqrt(n), signs s drawn from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=gen).float() * 2 - 1
    return signs[:, None] * hadamard_matrix(n) / n**0.5


def random_hadamard_transform(x: torch.Tensor, seed: int, *, inverse: bool = False) -> torch.Tensor:
    """Apply R (or R^T with `inverse`) to each block of 16 along the last dim, in float32."""
    if x.shape[-1] % HADAMARD_BLOCK != 0:
        raise ValueError(
            f"the last dimension ({x.shape[-1]}) must be a multiple of {HADAMARD_BLOCK}"
        )
    r = random_hadamard_matrix(seed).to(x.device)
    if inverse:
        r = r.T
    blocks = x.float().reshape(*x.shape[:-1], -1, HADAMARD_BLOCK)
    return (blocks @ r).reshape(x.shape)


__all__ = [
    "HADAMARD_BLOCK",
    "hadamard_matrix",
    "random_hadamard_matrix",
    "random_hadamard_transform",
]
