"""Asynchronous against synchronous RL at an equal number of trained samples.

Both runs are the same loop (`composer_rl.rl.orchestrator`) with the same configuration,
seed and starting checkpoint; the synchronous one alternates (generate a batch, train on
it), the asynchronous one keeps rollout slots full while the trainer steps. Each trains
`steps x groups_per_step x group_size` episodes. Printed: wall-clock of each, the ratio
(sync / async: above 1 means asynchrony paid), the mean reward of the trained batches and
the token lag of each. The comparison is `composer_rl.studies.async_rl.compare_modes`, the
same as `composer-rl study async` (which adds the plot and the verdict). Run it on an idle
machine; rerun to see the spread.

    uv run python packages/composer-rl/benchmarks/bench_async_vs_sync.py --model runs/stage1/sft/final
    uv run python packages/composer-rl/benchmarks/bench_async_vs_sync.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from composer_rl.agent.quick import random_checkpoint
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.studies.async_rl import Sizes, compare_modes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="stage-one checkpoint (with tokenizer.json)")
    parser.add_argument("--quick", action="store_true", help="a random tiny model, few steps")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--local", action="store_true", help="services in threads, not Ray")
    parser.add_argument("--work-dir", type=Path, help="keep the two run directories here")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="async-vs-sync-"))
    model = args.model
    overrides: dict[str, object] = {}
    if args.quick or model is None:
        model, overrides = random_checkpoint(work / "tiny"), dict(QUICK_RL_SETTINGS)
        args.steps = min(args.steps, 3)
        args.group_size = min(args.group_size, 2)
        args.groups_per_step = 1
    sizes = Sizes(args.steps, args.group_size, args.groups_per_step, local=args.local)
    results = compare_modes(model, work, sizes, overrides)
    print(f"{'mode':6} {'seconds':>8} {'reward':>16} {'token lag':>10} {'sequences':>10}")
    for mode, r in results.items():
        print(
            f"{mode:6} {r['seconds']:8.1f} {r['reward_mean']:8.3f} ± {r['reward_se']:.3f} "
            f"{r['token_lag_mean']:10.2f} {r['trained_sequences']:10d}"
        )
    ratio = results["sync"]["seconds"] / results["async"]["seconds"]
    print(f"wall-clock ratio sync / async: {ratio:.2f}x")
    print(f"run directories: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
