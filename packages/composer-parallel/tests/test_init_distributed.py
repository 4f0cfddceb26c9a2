"""`init_distributed` under torchrun's environment: the backend its caller's tensors need."""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any

import torch
import torch.distributed as dist

from composer_parallel import init_distributed
from composer_parallel.launch import LOOPBACK, free_port


def _rank(rank: int, port: int, backend: str | None, queue: Any) -> None:
    os.environ.update(
        MASTER_ADDR=LOOPBACK,
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
    )
    torch.cuda.is_available = lambda: True  # a GPU machine, as far as the choice can tell
    try:
        joined = init_distributed(backend)
        total = torch.tensor([rank + 1.0])  # host memory, as stage one's parallel phase keeps it
        dist.all_reduce(total)
        queue.put((rank, joined, dist.get_backend(), float(total)))
    except BaseException as error:  # the parent reports it
        queue.put((rank, False, repr(error), 0.0))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_gloo_is_joined_on_a_machine_with_gpus_when_the_caller_asks_for_it() -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, "gloo", queue)) for r in range(2)]
    for proc in procs:
        proc.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
    assert results == [(0, True, "gloo", 3.0), (1, True, "gloo", 3.0)]


def test_one_process_joins_nothing(monkeypatch: Any) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert init_distributed("gloo") is False
    assert not dist.is_initialized()
