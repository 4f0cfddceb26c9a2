"""Quantize throughput: composer-kernels vs torchao on the same tensors, in one run.

    uv run python packages/composer-kernels/benchmarks/bench_quantize.py [--rows 2048 --cols 4096]

GB/s counts the bytes of the high-precision input read once. The ratio is ours /
torchao (above 1: we are faster). Medians over --repeats runs after a warm-up, ours and
torchao timed alternately so that both see the same machine load. On a
CUDA machine both sides run on the GPU (ours through the Triton kernels).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from _timing import paired_medians

from composer_kernels.formats import mx_quantize, nvfp4_quantize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    args = parser.parse_args()

    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import (
        nvfp4_quantize as ao_nvfp4_quantize,
    )
    from torchao.prototype.mx_formats.nvfp4_tensor import per_tensor_amax_to_scale

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, args.cols, generator=gen).to(dtype).to(device)
    gigabytes = x.numel() * x.element_size() / 1e9

    def ao_nvfp4(per_token: bool) -> Callable[[], object]:
        def run() -> object:
            amax = x.abs().amax(-1, keepdim=True) if per_token else x.abs().amax()
            return ao_nvfp4_quantize(x, 16, per_tensor_amax_to_scale(amax))

        return run

    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "MXFP8 e4m3 floor",
            lambda: mx_quantize(x, "e4m3", scale_rule="floor"),
            lambda: to_mx(x, torch.float8_e4m3fn, 32, ScaleCalculationMode.FLOOR),
        ),
        (
            "MXFP8 e4m3 rceil",
            lambda: mx_quantize(x, "e4m3", scale_rule="rceil"),
            lambda: to_mx(x, torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL),
        ),
        (
            "NVFP4 per-tensor",
            lambda: nvfp4_quantize(x, scale_mode="per_tensor"),
            ao_nvfp4(per_token=False),
        ),
        ("NVFP4 per-token", lambda: nvfp4_quantize(x), ao_nvfp4(per_token=True)),
    ]
    print(f"device={device} threads={torch.get_num_threads()} x={tuple(x.shape)} {dtype}")
    print(f"{'format':<20} {'ours GB/s':>10} {'torchao GB/s':>13} {'ratio':>7}")
    for name, ours, theirs in cases:
        t_ours, t_theirs = paired_medians(ours, theirs, args.repeats, device)
        print(
            f"{name:<20} {gigabytes / t_ours:>10.3f} {gigabytes / t_theirs:>13.3f} "
            f"{t_theirs / t_ours:>7.2f}"
        )


if __name__ == "__main__":
    main()
