"""What a kill -9 between checkpoints costs an RL run: steps lost, episodes thrown away or
generated again, prompts of the epoch lost.

Runs `composer-rl rl` (services in threads, a random tiny policy with the quick settings
unless `--model` names one) in its own process group, kills the whole group once
`--kill-after` steps are logged, runs the same command again to the end, and reads the
run directory: metrics.jsonl (the restart record, the steps of the final lineage), the
group store and the sampler. Extra arguments after `--` go to both commands::

    uv run python packages/composer-rl/benchmarks/kill_cost.py --out /tmp/kill-cost
    uv run python packages/composer-rl/benchmarks/kill_cost.py --out /tmp/kill-cost-1 \
        -- --train.checkpoint-every 1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from composer_infra.checkpoint import GroupStore, StepCheckpointer
from composer_rl.agent.quick import random_checkpoint
from composer_rl.rl.lineage import final_lineage, restarts
from composer_rl.rl.quick import QUICK_RL_SETTINGS


def rows_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def task_of(group_id: str) -> str:
    return group_id.split("-", 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a new directory")
    parser.add_argument("--model", type=Path, default=None, help="default: a random tiny one")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--kill-after", type=int, default=4, help="steps logged before the kill")
    parser.add_argument("extra", nargs="*", help="more `composer-rl rl` flags (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=False)
    model = args.model or random_checkpoint(args.out / "sft")
    run = args.out / "run"
    quick = [
        x
        for k, v in QUICK_RL_SETTINGS.items()
        for x in ("--" + k.replace("_", "-"), str(v).lower())
    ]
    command = ["rl", "--model", str(model), "--run-dir", str(run), "--local", "true"]
    command += ["--loop.steps", str(args.steps), "--eval.per-template", "0", "--no-progress"]
    command += quick + list(args.extra)
    argv = [sys.executable, "-c", "import sys; from composer_rl.cli import main; sys.exit(main())"]
    print("composer-rl", " ".join(command), flush=True)
    metrics = run / "metrics.jsonl"
    with (args.out / "first.log").open("w") as log:
        job = subprocess.Popen(
            argv + command, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
        )
        while len(rows_of(metrics)) < args.kill_after:
            if job.poll() is not None:
                sys.exit(f"the run ended before step {args.kill_after}: see {args.out}/first.log")
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    before = rows_of(metrics)
    latest = StepCheckpointer(run / "checkpoints").latest()
    restored = json.loads((latest / "state.json").read_text())["step"] if latest else 0
    finished_then = set(GroupStore(run / "groups").ids())
    print(
        f"killed after step {before[-1]['step']}: checkpoint of step {restored}, "
        f"{len(finished_then)} groups finished",
        flush=True,
    )
    began = time.monotonic()
    with (args.out / "second.log").open("w") as log:
        subprocess.run(argv + command, stdout=log, stderr=subprocess.STDOUT, check=True)
    rows = rows_of(metrics)
    after = [r for r in rows[len(before) :] if r.get("kind", "step") == "step"]
    lineage = final_lineage(rows)
    trained = {g for r in lineage for g in r["trained_groups"]}
    final = StepCheckpointer(run / "checkpoints").latest()
    assert final is not None
    dropped = set(json.loads((final / "state.json").read_text())["sampler"]["dropped"])
    every = GroupStore(run / "groups").ids()
    group_size = tomllib.loads((run / "config.toml").read_text())["loop"]["group_size"]
    last = after[-1]
    stale, regenerated = last["count_groups_stale_dropped"], last["count_groups_regenerated"]
    lost_steps = [r for r in before if r["step"] > restored]
    retrained = {g for r in lost_steps for g in r["trained_groups"]}
    # A group finished before the kill, dropped, and no newer group of its task: its prompt
    # is gone from the single epoch.
    lost = [
        g
        for g in finished_then & dropped
        if not any(task_of(h) == task_of(g) and h > g for h in every)
    ]
    report = {
        "steps_lost": len(lost_steps),
        "restart_record": bool(restarts(rows)),
        "first_step_after": after[0]["step"],
        "first_version_after": after[0]["version"],
        "groups_finished_before_kill": len(finished_then),
        "groups_the_lost_steps_trained": len(retrained),
        "of_them_trained_again": len(retrained & trained),
        "groups_dropped_stale_after_restart": stale,
        "groups_regenerated_after_restart": regenerated,
        "episodes_thrown_away": (stale - regenerated) * group_size,
        "episodes_generated_again": regenerated * group_size,
        "prompts_lost_to_the_kill": len(lost),
        "resumed_run_seconds": round(time.monotonic() - began),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
