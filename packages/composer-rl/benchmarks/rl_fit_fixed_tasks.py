"""Can RL fit a handful of tasks it sees again and again? The learning machinery's check.

Held-out pass@1 did not move under RL at the defaults (issue 12), and neither did the
training solve rate within a run. That leaves two explanations: the signal of a few
thousand episodes does not carry from one task to the next, or the update itself is
wrong somewhere on the real path (multi-turn token records, masks, advantages,
importance weights, the optimizer step). This separates them. A few training tasks are
each copied `--repeats` times under new ids (a task file given to `tasks.source`), so the
single-epoch sampler hands each one out `--repeats` times, and the real RL loop
(`run_rl`: engine, sandboxes, reward plugins, trainer, weight store) trains on them. The
SFT policy and the final policy are then scored on exactly those tasks: greedy pass@1
and the temperature-1 solve rate (`--k` samples a task), paired by task. If RL cannot
raise the solve rate of tasks it trained on `--repeats` times, the update is broken; if
it can, the machinery works and the question is sample efficiency and transfer.

    uv run python packages/composer-rl/benchmarks/rl_fit_fixed_tasks.py \\
        --model runs/stage1b/sft/final
    uv run python packages/composer-rl/benchmarks/rl_fit_fixed_tasks.py --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.scores import PolicyScores, score_policy
from composer_rl.rl.compare import paired_margin
from composer_rl.rl.config import load_config
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.rl.run import run_rl
from composer_rl.studies.fixed_tasks import FixedTasks, training_curve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="the SFT checkpoint RL starts from")
    parser.add_argument("--tasks", type=int, default=16, help="distinct training tasks")
    parser.add_argument("--repeats", type=int, default=8, help="times each task is handed out")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--k", type=int, default=8, help="temperature-1 samples a task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a random tiny model, 2 tasks")
    parser.add_argument("--work-dir", type=Path, help="run and scores are kept here")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="rl-fit-"))
    work.mkdir(parents=True, exist_ok=True)
    overrides: dict[str, Any] = {}
    model = args.model
    if args.quick or model is None:
        model, overrides = random_checkpoint(work / "tiny"), dict(QUICK_RL_SETTINGS)
        overrides.pop("tasks.per_template")
        args.tasks, args.repeats, args.group_size, args.groups_per_step, args.k = 2, 2, 2, 1, 2
    tasks, task_file = FixedTasks(args.tasks, args.repeats).write(args.seed, work / "tasks.jsonl")
    steps = args.tasks * args.repeats // args.groups_per_step
    config = load_config(
        None,
        {
            **overrides,
            "model": str(model),
            "run_dir": str(work / "run"),
            "seed": args.seed,
            "local": True,
            "threads": args.threads,
            "tasks.source": str(task_file),
            "loop.steps": steps,
            "loop.group_size": args.group_size,
            "loop.groups_per_step": args.groups_per_step,
            "loop.upsample_hard_after": None,
            "train.optim.lr": args.lr,
            "eval.per_template": 0,
        },
    )
    final = config.run_dir / "final"
    if not (final / "tokenizer.json").is_file():
        began = time.monotonic()
        run_rl(config)
        print(f"RL on {args.tasks} tasks x {args.repeats}: {time.monotonic() - began:.0f} s")
    runner = config.rollout
    scores: dict[str, PolicyScores] = {}
    for name, checkpoint in (("sft", model), ("rl", final)):
        scores[name] = score_policy(
            name, checkpoint, tasks, runner=runner, samples_for_k=args.k, threads=args.threads
        )
    print(f"\n{args.tasks} tasks, each trained on {args.repeats} times "
          f"({args.group_size} episodes a time, lr {args.lr:g}, {steps} steps)")  # fmt: skip
    print("training solve rate by quarter of the run (mean ± s.e. over groups):")
    for i, (mean, se, n) in enumerate(training_curve(config.run_dir), 1):
        print(f"  quarter {i}: {mean:.3f} ± {se:.3f} ({n} episodes)")
    rows = {
        "greedy pass@1": ("per_task_pass1", "greedy"),
        f"solve rate at T=1 ({args.k} samples)": ("per_task_sampled_pass1", "sampled"),
    }
    result: dict[str, Any] = {"tasks": [t.id for t in tasks], "repeats": args.repeats}
    for label, (field, key) in rows.items():
        sft, rl = getattr(scores["sft"], field), getattr(scores["rl"], field)
        margin, se, _ = paired_margin(sft, rl)
        print(
            f"{label}: SFT {statistics.fmean(sft.values()):.3f}, RL {statistics.fmean(rl.values()):.3f}"
            f", margin {margin:+.3f} ± {se:.3f} (paired over tasks)"
        )
        result[key] = {"sft": sft, "rl": rl, "margin": margin, "se": se}
    result["curve"] = training_curve(config.run_dir)
    (work / "fit.json").write_text(json.dumps(result, indent=2))
    print(f"run directory: {config.run_dir}; numbers: {work / 'fit.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
