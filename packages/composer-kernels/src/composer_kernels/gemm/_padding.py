"""Zero padding of a dimension to a block multiple.

Zeros never change a block's largest magnitude, so they never change a scale, and
they contribute nothing to a dot product: padding the reduction dimension before
block quantization and slicing it off afterwards is exact.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def with_padding(
    x: torch.Tensor, dim: int, multiple: int, fn: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """fn(x padded with zeros along `dim` to a multiple of `multiple`), cut back to x's size."""
    dim = dim % x.dim()
    size = x.shape[dim]
    extra = (-size) % multiple
    if extra == 0:
        return fn(x)
    pad = [0, 0] * (x.dim() - dim - 1) + [0, extra]
    return fn(F.pad(x, pad)).narrow(dim, 0, size)
