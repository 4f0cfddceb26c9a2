"""A few RL steps of the training service, in one process or as one torchrun rank.

`python -m torch.distributed.run --nproc-per-node 2 tests/_parallel_rl_job.py OUT --dp 2 --ep 2`
runs the service data- and expert-parallel (`--cp 2` context-parallel); `run(...)` with all
dims 1 is the one-process reference. Every rank is given the whole batch of trajectories,
as the service requires. The trajectories carry recorded experts (router replay) and the
service keeps a KL reference, so both run sharded under cp.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from _services_support import VOCAB, micro_config, token_batch

from composer_infra.checkpoint import Trajectory
from composer_model import OptimConfig
from composer_parallel import init_distributed
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.services.training import TrainingConfig, TrainingService
from composer_rl.stages.config import ParallelConfig

STEPS = 3


def trajectories(step: int, count: int = 6) -> list[Trajectory]:
    """Uneven episodes: a prompt (not sampled) then sampled tokens with behaviour logprobs
    and the experts 'inference' chose for every token at every MoE layer."""
    rng = random.Random(100 + step)
    config = micro_config()
    out = []
    for i in range(count):
        prompt, answer = rng.randint(3, 8), rng.randint(4, 20)
        n = prompt + answer
        sampled = [False] * prompt + [True] * answer
        routing = [
            [
                rng.sample(range(config.n_routed_experts), config.num_experts_per_tok)
                for _ in range(config.num_moe_layers)
            ]
            for _ in range(n)
        ]
        out.append(
            Trajectory(
                tokens=[rng.randint(1, VOCAB - 1) for _ in range(n)],
                sampled=sampled,
                logprobs=[-rng.uniform(2.0, 6.0) if s else 0.0 for s in sampled],
                versions=[0 if s else -1 for s in sampled],
                routing=routing,
                advantage=1.0 if i % 2 else -0.5,
                episode_id=f"e{step}-{i}",
            )
        )
    return out


def run(out: Path, dp: int = 1, ep: int = 1, cp: int = 1) -> list[dict[str, Any]]:
    """STEPS RL steps, then one next-token step (the service's `train_step`); the stats of
    every step, and the final policy exported to out/final."""
    config = TrainingConfig(
        optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=0),
        seed=1,
        threads=1,
        checkpoint_every=2,
        rl=RLLossConfig(mtp_weight=0.1, kl_coef=0.05),
        reference=True,
        parallel=ParallelConfig(dp=dp, cp=cp, ep=ep),
    )
    service = TrainingService(
        micro_config(), (out / "weights").as_uri(), out / "checkpoints", config
    )
    stats = [service.train_rl(trajectories(step)).metrics() for step in range(STEPS)]
    stats.append(service.train_step(token_batch(seed=7, rows=5, length=20)).metrics())
    service.export(str(out / "final"))
    service.close()
    return stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--dp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument("--cp", type=int, default=1)
    args = parser.parse_args()
    init_distributed()
    import torch.distributed as dist

    stats = run(args.out, args.dp, args.ep, args.cp)
    if dist.get_rank() == 0:
        (args.out / "stats.json").write_text(json.dumps(stats))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
