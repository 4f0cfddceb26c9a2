"""torch's fused grouped GEMM (`grouped_mm_native`) and `grouped_mm` vs a per-expert loop.

    uv run python packages/composer-kernels/benchmarks/bench_grouped_mm.py

Forward and forward+backward, bfloat16, tokens spread unevenly over experts (as a
router does). The ratio is loop time / fused time (above 1: the fused GEMM is faster).
`grouped_mm` itself picks the fused GEMM on CUDA and the loop on the CPU. Medians over --repeats runs after a warm-up, the two sides timed alternately so that
both see the same machine load. Also times the quantized recipe
(an emulation: it is slower by design; its cost is reported, not compared).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from _timing import paired_medians

from composer_kernels import quantized_grouped_mm
from composer_kernels.grouped_mm import (
    grouped_mm_loop,
    grouped_mm_native,
    native_grouped_mm_applies,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    # Uneven expert loads: a softmax over random logits, like a router's histogram.
    share = torch.softmax(torch.randn(args.experts, generator=gen), 0)
    counts = (share * args.tokens).floor().long()
    counts[-1] += args.tokens - counts.sum()
    offsets = counts.cumsum(0).to(device)
    x = torch.randn(args.tokens, args.hidden, generator=gen).bfloat16().to(device)
    w = (torch.randn(args.experts, args.hidden, args.ffn, generator=gen) / 16).bfloat16().to(device)
    x.requires_grad_()
    w.requires_grad_()
    grad = torch.randn(args.tokens, args.ffn, generator=gen).bfloat16().to(device)

    def fwd(fn: Callable[..., torch.Tensor]) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return fn(x, w, offsets)

        return run

    def fwd_bwd(fn: Callable[..., torch.Tensor]) -> Callable[[], object]:
        def run() -> object:
            return torch.autograd.grad(fn(x, w, offsets), (x, w), grad)

        return run

    print(
        f"device={device} threads={torch.get_num_threads()} tokens={args.tokens} "
        f"experts={args.experts} K={args.hidden} N={args.ffn} bf16 "
        f"native={native_grouped_mm_applies(x, w)}"
    )
    print(f"{'pass':<14} {'fused ms':>14} {'loop ms':>9} {'ratio':>7}")
    for name, make in (("forward", fwd), ("forward+back", fwd_bwd)):
        t_ours, t_loop = paired_medians(
            make(grouped_mm_native), make(grouped_mm_loop), args.repeats, device
        )
        print(f"{name:<14} {t_ours * 1e3:>14.2f} {t_loop * 1e3:>9.2f} {t_loop / t_ours:>7.2f}")
    t_q, t_hp = paired_medians(
        fwd_bwd(quantized_grouped_mm), fwd_bwd(grouped_mm_loop), max(3, args.repeats // 3), device
    )
    print(
        f"quantized_grouped_mm forward+back (NVFP4/MXFP8 emulation): {t_q * 1e3:.2f} ms, "
        f"{t_q / t_hp:.1f}x the bf16 loop (emulation cost, not a speed claim)"
    )


if __name__ == "__main__":
    main()
