"""Compute imbalance (max/mean over DP ranks of sum a*L + L^2) of round-robin, greedy and
Karmarkar-Karp on a real length distribution: the Python standard library's .py files
(the tiny model's pretraining corpus), at ~4 bytes a token, cut at a context length.

    uv run python packages/composer-parallel/benchmarks/packing_imbalance.py

Prints a markdown table (mean and worst over the sampled global batches).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sysconfig
from pathlib import Path

from composer_model import preset
from composer_parallel.packing import (
    attention_cost_ratio,
    greedy,
    imbalance,
    karmarkar_karp,
    round_robin,
    sequence_cost,
)

BYTES_PER_TOKEN = 4


def stdlib_lengths(context: int) -> list[int]:
    root = Path(sysconfig.get_paths()["stdlib"])
    sizes = [p.stat().st_size for p in sorted(root.rglob("*.py")) if "site-packages" not in p.parts]
    return [min(context, max(1, s // BYTES_PER_TOKEN)) for s in sizes if s > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="sequences in a global batch")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--context", type=int, default=32768)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lengths = stdlib_lengths(args.context)
    print(
        f"{len(lengths)} stdlib files, tokens median {statistics.median(lengths):.0f}, "
        f"mean {statistics.mean(lengths):.0f}, max {max(lengths)} (context {args.context}); "
        f"global batch {args.batch} sequences, {args.batches} batches, seed {args.seed}\n"
    )
    print(
        "| model (a) | dp | round-robin mean / worst | greedy mean / worst "
        "| Karmarkar-Karp mean / worst | floor: heaviest sequence / mean, worst |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in ("tiny", "kimi-k2"):
        a = attention_cost_ratio(preset(name))
        for dp in (8, 32, 128):
            rng = random.Random(args.seed)
            scores: dict[str, list[float]] = {"rr": [], "greedy": [], "kk": []}
            floors: list[float] = []
            for _ in range(args.batches):
                costs = [sequence_cost(n, a) for n in rng.sample(lengths, args.batch)]
                scores["rr"].append(imbalance(costs, round_robin(costs, dp)))
                scores["greedy"].append(imbalance(costs, greedy(costs, dp)))
                scores["kk"].append(imbalance(costs, karmarkar_karp(costs, dp)))
                floors.append(max(1.0, max(costs) / (sum(costs) / dp)))
            cells = " | ".join(f"{statistics.mean(v):.3f} / {max(v):.3f}" for v in scores.values())
            print(f"| {name} ({a:.0f}) | {dp} | {cells} | {max(floors):.3f} |")


if __name__ == "__main__":
    main()
