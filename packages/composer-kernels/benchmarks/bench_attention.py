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
    mla_widths(args.repeats, gen)


def mla_widths(repeats: int, gen: torch.Generator) -> None:
    """MLA's values are narrower than its queries and keys (tiny: 32 against 48).

    Ours pads v to the query width so SDPA takes its fused CPU kernel; the peer is the same
    SDPA call on the unpadded tensors (what it does on its own: the unfused path).
    """
    print("MLA widths: heads=4, q/k 48, v 32, causal; peer = F.scaled_dot_product_attention")
    print(f"{'shape':>22} {'ours ms':>9} {'sdpa ms':>9} {'ratio':>7}")
    for batch, total, docs in ((4, 256, 1), (1, 2048, 4)):
        q = torch.randn(batch * total, 4, 48, generator=gen, requires_grad=True)
        k = torch.randn(batch * total, 4, 48, generator=gen, requires_grad=True)
        v = torch.randn(batch * total, 4, 32, generator=gen, requires_grad=True)
        g = torch.randn(batch * total, 4, 32, generator=gen)
        if docs > 1:
            cuts = sorted(torch.randperm(total - 1, generator=gen)[: docs - 1].add(1).tolist())
            cu = torch.tensor([0, *cuts, total])
            doc = torch.zeros(total, dtype=torch.long)
            doc[cu[1:-1]] = 1
            doc = doc.cumsum(0)
            mask = (doc[:, None] == doc[None, :]) & torch.ones(
                total, total, dtype=torch.bool
            ).tril()
        else:
            cu = torch.arange(batch + 1) * total
            mask = None

        def ours(q=q, k=k, v=v, cu=cu, g=g) -> object:  # type: ignore[no-untyped-def]
            return torch.autograd.grad(attention(q, k, v, cu_seqlens=cu), (q, k, v), g)

        def peer(q=q, k=k, v=v, g=g, mask=mask, batch=batch, total=total) -> object:  # type: ignore[no-untyped-def]
            rows = [x.view(batch, total, 4, -1).transpose(1, 2) for x in (q, k, v)]
            out = torch.nn.functional.scaled_dot_product_attention(
                *rows, attn_mask=mask, is_causal=mask is None
            )
            out = out.transpose(1, 2).reshape(batch * total, 4, 32)
            return torch.autograd.grad(out, (q, k, v), g)

        t_ours, t_peer = paired_medians(ours, peer, repeats, q.device)
        shape = f"{batch}x{total}" + (f", {docs} documents" if docs > 1 else " batch")
        print(f"{shape:>22} {t_ours * 1e3:>9.1f} {t_peer * 1e3:>9.1f} {t_peer / t_ours:>7.2f}")


if __name__ == "__main__":
    main()
