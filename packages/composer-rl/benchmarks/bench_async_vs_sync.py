"""Asynchronous against synchronous RL at an equal number of trained samples.

Both runs are the same loop (`composer_rl.rl.orchestrator`) with the same configuration,
seed and starting checkpoint; the synchronous one alternates (generate a batch, train on
it), the asynchronous one keeps rollout slots full while the trainer steps. Each trains
`steps x groups_per_step x group_size` episodes. Printed: wall-clock of each, the ratio
(sync / async: above 1 means asynchrony paid), the mean reward of the last steps and the
token lag of each. Run it on an idle machine; rerun to see the spread.

    uv run python packages/composer-rl/benchmarks/bench_async_vs_sync.py --model runs/stage1/sft/final
    uv run python packages/composer-rl/benchmarks/bench_async_vs_sync.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from composer_rl.rl.config import load_config
from composer_rl.rl.run import run_rl


def _quick_run(directory: Path) -> tuple[Path, dict[str, object]]:
    """The tests' random tiny checkpoint and the settings sized for it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _rl_helpers import QUICK_RL_SETTINGS, tiny_checkpoint

    return tiny_checkpoint(directory), dict(QUICK_RL_SETTINGS)


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
        model, overrides = _quick_run(work / "tiny")
        args.steps = min(args.steps, 3)
        args.group_size = min(args.group_size, 2)
        args.groups_per_step = 1
    results = {}
    for mode in ("sync", "async"):
        run_dir = work / mode
        shutil.rmtree(run_dir, ignore_errors=True)
        config = load_config(
            None,
            {
                **overrides,
                "model": str(model),
                "run_dir": str(run_dir),
                "local": args.local,
                "loop.steps": args.steps,
                "loop.group_size": args.group_size,
                "loop.groups_per_step": args.groups_per_step,
                "loop.sync": mode == "sync",
                "eval.per_template": 0,
            },
        )
        began = time.monotonic()
        history = run_rl(config)
        seconds = time.monotonic() - began
        tail = [
            r["reward_mean"]
            for r in history[-max(1, len(history) // 3) :]
            if r["reward_mean"] is not None
        ]
        results[mode] = {
            "seconds": seconds,
            "reward_last_third": statistics.fmean(tail) if tail else float("nan"),
            "lag": statistics.fmean(r["token_lag_mean"] for r in history),
            "trained_sequences": sum(r["sequences"] for r in history),
        }
    s, a = results["sync"], results["async"]
    print(
        f"{'mode':6} {'seconds':>8} {'reward (last third)':>20} {'token lag':>10} {'sequences':>10}"
    )
    for mode, r in results.items():
        print(
            f"{mode:6} {r['seconds']:8.1f} {r['reward_last_third']:20.3f} {r['lag']:10.2f} "
            f"{r['trained_sequences']:10d}"
        )
    print(f"wall-clock ratio sync / async: {s['seconds'] / a['seconds']:.2f}x")
    print(f"run directories: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
