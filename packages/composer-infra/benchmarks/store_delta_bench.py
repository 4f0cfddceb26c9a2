"""Weight-store benchmark on real updates: delta size, unchanged bf16 weights, latency.

A tiny transformer-shaped model (embeddings, attention projections, MLPs, norms; about
4M parameters) is trained with Adam in fp32 master weights on a synthetic next-token
task; after every optimizer step its bf16 copy (what inference serves) is published.
For each learning rate we report:

- the fraction of bf16 weights bit-identical to the previous step,
- bytes per delta against the full bf16 checkpoint (safetensors), the named peer,
- median publish-to-applied latency (publish, then a subscriber syncs and verifies)
  for XOR+zstd deltas against the peer of a full snapshot every version,
  on the file:// store and on S3 (moto's server on loopback).

    uv run python packages/composer-infra/benchmarks/store_delta_bench.py
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

import boto3
import torch
from rich.console import Console
from rich.progress import track
from rich.table import Table
from safetensors.torch import save as safetensors_save
from torch import nn

from composer_infra.store import (
    FileStore,
    ObjectStore,
    PublisherConfig,
    S3Store,
    WeightPublisher,
    WeightSubscriber,
)
from composer_infra.store.manifest import blob_key

console = Console()


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)
        self.heads = 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 4096, dim: int = 256, layers: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def bf16_versions(lr: float, steps: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """The bf16 state after init and after each of `steps` Adam steps."""
    torch.manual_seed(seed)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    versions = [{k: v.detach().to(torch.bfloat16).clone() for k, v in model.state_dict().items()}]
    for _ in track(range(steps), description=f"training lr={lr:g}", console=console):
        ids = torch.randint(0, 4096, (4, 64), generator=g)
        logits = model(ids[:, :-1])
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        versions.append(
            {k: v.detach().to(torch.bfloat16).clone() for k, v in model.state_dict().items()}
        )
    return versions


def unchanged_fraction(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    same = sum(int((a[k].view(torch.int16) == b[k].view(torch.int16)).sum()) for k in a)
    return same / sum(t.numel() for t in a.values())


def run_store(
    store: ObjectStore, versions: list[dict[str, torch.Tensor]], snapshot_every: int
) -> tuple[list[int], list[float]]:
    """Publish every version; after each, sync a subscriber. Returns delta bytes, latencies."""
    sizes, latencies = [], []
    sub = WeightSubscriber(store)
    with WeightPublisher(store, PublisherConfig(snapshot_every=snapshot_every)) as pub:
        for v, state in enumerate(versions):
            start = time.perf_counter()
            manifest = pub.publish(state, v).result()
            while sub.sync() != v:
                time.sleep(0.001)
            latencies.append(time.perf_counter() - start)
            sizes.append(manifest.blob_size)
            assert len(store.get(blob_key(v, 0, 1))) == manifest.blob_size
    sub.close()
    # Version 0 is the initial snapshot in both modes; measure steady state only.
    return sizes[1:], latencies[1:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-6, 1e-5, 3e-5, 1e-4, 3e-4])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 (moto on loopback) runs")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

    s3_endpoint = None
    server = None
    if not args.no_s3:
        from moto.server import ThreadedMotoServer

        for var, value in [
            ("AWS_ACCESS_KEY_ID", "bench"),
            ("AWS_SECRET_ACCESS_KEY", "bench"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ]:
            os.environ.setdefault(var, value)
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        s3_endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="bench")

    table = Table(
        title="XOR+zstd deltas of bf16 weights after real Adam steps (medians over steps)"
    )
    for col in [
        "lr",
        "bf16 unchanged",
        "full bf16 ckpt",
        "delta",
        "delta/full",
        "store",
        "latency delta",
        "latency full snapshot",
        "ratio",
    ]:
        table.add_column(col, justify="right")
    try:
        for lr in args.lrs:
            versions = bf16_versions(lr, args.steps, seed=0)
            unchanged = statistics.median(
                unchanged_fraction(a, b) for a, b in itertools.pairwise(versions)
            )
            full_bytes = len(safetensors_save(versions[-1]))
            stores: list[tuple[str, object]] = [("file", None)]
            if s3_endpoint:
                stores.append(("s3", None))
            for kind, _ in stores:
                results = {}
                for mode, every in [("delta", 10_000), ("full", 1)]:
                    with tempfile.TemporaryDirectory() as tmp:
                        store: ObjectStore
                        if kind == "file":
                            store = FileStore(Path(tmp))
                        else:
                            store = S3Store(f"s3://bench/lr{lr:g}-{mode}", endpoint_url=s3_endpoint)
                        results[mode] = run_store(store, versions, every)
                delta_bytes = statistics.median(results["delta"][0])
                lat_delta = statistics.median(results["delta"][1])
                lat_full = statistics.median(results["full"][1])
                table.add_row(
                    f"{lr:g}",
                    f"{unchanged:.2%}",
                    f"{full_bytes / 1e6:.2f} MB",
                    f"{delta_bytes / 1e6:.3f} MB",
                    f"{delta_bytes / full_bytes:.3f}",
                    kind,
                    f"{lat_delta * 1e3:.1f} ms",
                    f"{lat_full * 1e3:.1f} ms",
                    f"{lat_full / lat_delta:.2f}x",
                )
    finally:
        if server is not None:
            server.stop()
    console.print(table)


if __name__ == "__main__":
    main()
