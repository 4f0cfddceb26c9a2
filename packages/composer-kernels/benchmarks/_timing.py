"""Timing shared by the benchmark scripts: paired medians, so both sides see the same load."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def seconds(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of one call, synchronising CUDA around it."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def paired_medians(
    a: Callable[[], object], b: Callable[[], object], repeats: int, device: torch.device
) -> tuple[float, float]:
    """Median seconds of `a` and of `b`, timed alternately so both see the same load."""
    a()  # warm-up (and Triton compilation)
    b()
    times_a, times_b = [], []
    for _ in range(repeats):
        times_a.append(seconds(a, device))
        times_b.append(seconds(b, device))
    return statistics.median(times_a), statistics.median(times_b)
