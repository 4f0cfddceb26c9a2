"""Run a function on N local processes joined by a gloo process group (loopback only).

Used by the multi-rank tests and by `train.run_local` on one machine; on a cluster the
same rank functions run under torchrun, which sets the rendezvous variables itself.
"""

from __future__ import annotations

import io
import os
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _worker(
    rank: int,
    world_size: int,
    port: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    queue: Any,
    threads: int,
) -> None:
    os.environ.update(
        MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size)
    )
    torch.set_num_threads(threads)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        result = fn(rank, world_size, *args)
        buffer = io.BytesIO()  # plain bytes: shared-memory tensors die with this process
        torch.save(result, buffer)
        queue.put((rank, True, buffer.getvalue()))
    except BaseException:  # report every failure to the parent, then exit non-zero
        queue.put((rank, False, traceback.format_exc()))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_local(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout_s: float = 600.0,
    threads: int = 1,
) -> list[Any]:
    """`fn(rank, world_size, *args)` on `world_size` spawned processes; the results by rank.

    `fn` must be importable (a module-level function). A rank that raises makes this raise
    with that rank's traceback; a hung group fails after `timeout_s`.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1; got {world_size}")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(rank, world_size, port, fn, args, queue, threads))
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    results: dict[int, Any] = {}
    failure: str | None = None
    try:
        for _ in range(world_size):
            rank, ok, payload = queue.get(timeout=timeout_s)
            if not ok:
                failure = f"rank {rank} failed:\n{payload}"
                break
            results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
    finally:
        for proc in procs:
            proc.join(timeout=5 if failure else timeout_s)
            if proc.is_alive():
                proc.kill()
                proc.join()
    if failure is not None:
        raise RuntimeError(failure)
    return [results[r] for r in range(world_size)]


__all__ = ["LOOPBACK", "free_port", "run_local"]
