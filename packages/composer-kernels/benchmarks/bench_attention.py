"""Varlen attention on the CPU: `attention` vs the plain float32 reference it replaced.

    uv run python packages/composer-kernels/benchmarks/bench_attention.py

Forward + backward over one packed sequence of several documents (GQA 8:2). The
reference materialises softmax(QK^T) over the whole pack with a document mask; ours
calls SDPA with a boolean document mask (or once per document for long packs). Ratio =
reference time / ours. Medians, the two sides timed alternately.
"""

from __future__ import annotations

import argparse
import math

import torch
from _timing import paired_medians

from composer_kernels import attention


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
    total, heads, dim = q.shape
    repeat = heads // k.shape[1]
    k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
    doc = torch.zeros(total, dtype=torch.long)
    doc[cu[1:-1].long()] = 1
    doc = doc.cumsum(0)
    mask = (doc[:, None] == doc[None, :]) & torch.ones(total, total, dtype=torch.bool).tril()
    scores = (q.transpose(0, 1) @ k.transpose(0, 1).transpose(1, 2)) / math.sqrt(dim)
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1) @ v.transpose(0, 1)).transpose(0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"threads={torch.get_num_threads()} heads=8 kv_heads=2 head_dim=64 float32")
    print(f"{'tokens':>7} {'docs':>5} {'ours ms':>9} {'reference ms':>13} {'ratio':>7}")
    for total, docs in ((512, 4), (2048, 8), (2048, 64), (4096, 16)):
        cuts = sorted(torch.randperm(total - 1, generator=gen)[: docs - 1].add(1).tolist())
        cu = torch.tensor([0, *cuts, total])
        q = torch.randn(total, 8, 64, generator=gen, requires_grad=True)
        k = torch.randn(total, 2, 64, generator=gen, requires_grad=True)
        v = torch.randn(total, 2, 64, generator=gen, requires_grad=True)
        g = torch.randn(total, 8, 64, generator=gen)

        def ours(q=q, k=k, v=v, cu=cu, g=g) -> object:  # type: ignore[no-untyped-def]
            return torch.autograd.grad(attention(q, k, v, cu_seqlens=cu), (q, k, v), g)

        def ref(q=q, k=k, v=v, cu=cu, g=g) -> object:  # type: ignore[no-untyped-def]
            return torch.autograd.grad(reference(q, k, v, cu), (q, k, v), g)

        t_ours, t_ref = paired_medians(ours, ref, args.repeats, q.device)
        print(
            f"{total:>7} {docs:>5} {t_ours * 1e3:>9.1f} {t_ref * 1e3:>13.1f} {t_ref / t_ours:>7.2f}"
        )


if __name__ == "__main__":
    main()
