"""The cases on which the Triton quantizers must equal the PyTorch reference bit for bit.

Run as a script (`python _triton_cases.py DEVICE SIZE`) it prints one JSON object, case
name to verdict. The Triton side runs on DEVICE: "cpu" under TRITON_INTERPRET=1 (small
shapes, the interpreter runs every program in Python) or "cuda" (large shapes, compiled
kernels). The reference always runs on the CPU, where it is tested against the formats'
definitions and torchao, so a GPU's own rounding cannot hide in both sides.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

import torch

from composer_kernels.formats import mx_quantize, nvfp4_quantize
from composer_kernels.triton_kernels._nvfp4 import (
    nvfp4_quantize_per_tensor,
    nvfp4_quantize_per_token,
)


def _edge_rows(x: torch.Tensor) -> torch.Tensor:
    x[0, 3] = math.nan
    x[1, 40 % x.shape[1]] = math.inf
    x[2] = 0.0
    x[3, :16] = 1e-42  # float32 subnormals
    x[4, 16:32] = -1e-30
    return x


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bits, except that any NaN equals any NaN in a float32 tensor.

    The codes (E2M1 pairs, E4M3 and E8M0 scales) are compared bit for bit. The float32
    global scale of a tensor holding a NaN is a NaN whose payload is the device's own
    (a CUDA reduction gives 0x7fffffff, the CPU 0x7fc00000); neither format defines it.
    """
    a, b = a.cpu(), b.cpu()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.float32:
        nan = a.isnan()
        if not torch.equal(nan, b.isnan()):
            return False
        a, b = a.masked_fill(nan, 0), b.masked_fill(nan, 0)
    if a.is_floating_point():
        a, b = a.view(torch.uint8), b.view(torch.uint8)  # signed zeros count
    return torch.equal(a, b)


def cases(device: str, large: bool) -> dict[str, bool]:
    """Every case's verdict: 12 MX (8 float32, 4 bfloat16) and 14 NVFP4."""
    warnings.filterwarnings("ignore")
    gen = torch.Generator().manual_seed(0)
    rows, cols = (257, 4096) if large else (9, 128)
    nv_shapes = (
        (((513, 2048), 2), ((65, 512), 16), ((3, 70, 1024), 1))
        if large
        else (((9, 96), 2), ((5, 32), 16), ((2, 5, 48), 1))
    )
    results: dict[str, bool] = {}
    for dtype in (torch.float32, torch.bfloat16):
        base = torch.randn(rows, cols, generator=gen) * torch.logspace(-5, 5, cols)
        x = _edge_rows(base).to(dtype)
        for elem in ("e4m3", "e5m2"):
            for rule in ("floor", "rceil"):
                for dim in (-1, 0) if dtype == torch.float32 else (-1,):
                    xs = (
                        x
                        if dim == -1
                        else torch.randn(64 * (8 if large else 1), 5, generator=gen).to(dtype)
                    )
                    t = mx_quantize(xs.to(device), elem, scale_rule=rule, dim=dim, backend="triton")
                    r = mx_quantize(xs, elem, scale_rule=rule, dim=dim, backend="torch")
                    key = f"mx-{elem}-{rule}-dim{dim}-{str(dtype)[6:]}"
                    results[key] = _same(t.scales, r.scales) and _same(t.data, r.data)
        for shape, step in nv_shapes:
            x = torch.randn(*shape, generator=gen) * torch.logspace(-3, 3, shape[-1])
            if len(shape) == 2 and shape[0] >= 5:
                x = _edge_rows(x)
            x = x.to(dtype)
            key = f"nvfp4-{'x'.join(map(str, shape))}-step{step}-{str(dtype)[6:]}"
            data, scales, g = nvfp4_quantize_per_token(x.to(device), blocks_per_step=step)
            r = nvfp4_quantize(x, backend="torch")
            results[key] = (
                _same(data, r.data)
                and _same(scales, r.block_scales.view(torch.uint8))
                and _same(g, r.global_scale)
            )
            data, scales, g = nvfp4_quantize_per_tensor(x.to(device), blocks_per_step=step)
            r = nvfp4_quantize(x, scale_mode="per_tensor", backend="torch")
            results[key.replace("nvfp4", "nvfp4-per-tensor")] = (
                _same(data, r.data)
                and _same(scales, r.block_scales.view(torch.uint8))
                and _same(g, r.global_scale)
            )
        auto = nvfp4_quantize(x.to(device), backend="triton")
        r = nvfp4_quantize(x, backend="torch")
        results[f"nvfp4-public-{str(dtype)[6:]}"] = _same(auto.data, r.data) and _same(
            auto.block_scales, r.block_scales
        )
    return results


if __name__ == "__main__":
    print(json.dumps(cases(sys.argv[1], sys.argv[2] == "large")))
