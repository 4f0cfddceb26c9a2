"""Where do a policy's episodes end, and what did they spend their turns on?

Pass@1 and the behaviour rates say what a policy achieved; this says where the turns went.
Each checkpoint plays one greedy episode per task with RL's rollout settings (the turn
limit learning_margin.py scores with), and the episodes' tool calls are counted:

- how the episodes stopped (finish, the turn limit, the token limit, a full context);
- the calls by tool, how many reads failed (a missing file), and the `run` commands by
  their first word (a search is a `run` as much as a test run is);
- where the missing names come from (`missing_name_source`: the task's instruction or file
  names, or nowhere in the task, i.e. recalled or invented), and what the read right after
  a listing that follows a failed read finds (`read_after_listing`: the right file, the
  same missing path, another missing one): whether the listing was used;
- the behaviour rates of `composer_rl.eval.behaviour` over these episodes, each with its
  standard error, among them `failed_read_again`;
- the same, among the episodes cut by the turn limit;
- with more than one checkpoint, each later one against the first, paired over tasks: the
  solved share and every behaviour rate, as a margin and its paired standard error;
- what the do-nothing and random baselines solve on the same tasks, with the same runner
  (`composer_rl.eval.baselines`).

Written for issue 29's question why careful-only SFT ran the tests less than SFT on the mix
(docs/rl/2026-12-05-failed-read-loops.md). The episodes' calls go to --out as JSON lines.

    uv run python packages/composer-rl/benchmarks/episode_ends.py \\
        --models runs/stage1-careful/sft/final runs/stage1-words2/sft/final
    uv run python packages/composer-rl/benchmarks/episode_ends.py --quick   # random tiny model
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from composer_model import ComposerTokenizer
from composer_rewards import ToolCall
from composer_rl.agent.episode import EpisodeResult, episode_view
from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.baselines import baseline_scores
from composer_rl.eval.behaviour import behaviour_rates, per_task_behaviours
from composer_rl.eval.evaluate import EvalConfig, run_eval
from composer_rl.eval.stats import format_se, mean_se
from composer_rl.rl.compare import SPLITS, paired_margin
from composer_rl.rl.config import RLConfig
from composer_rl.tasks import Task


def per_task_rates(
    results: list[EpisodeResult], tokenizer: ComposerTokenizer
) -> dict[str, dict[str, float]]:
    """{"solved" or a behaviour: {task id: the task's value}}: what a paired comparison of
    two checkpoints on the same tasks needs."""
    views = [(r.task.id, episode_view(r, tokenizer), r.solved) for r in results]
    return {"solved": {r.task.id: float(r.solved) for r in results}} | per_task_behaviours(views)


def _rates(results: list[EpisodeResult], tokenizer: ComposerTokenizer) -> dict[str, str]:
    per_task = per_task_rates(results, tokenizer)
    del per_task["solved"]
    rates = behaviour_rates(per_task)
    return {name: f"{mean:.3f} ± {se:.3f} ({n})" for name, (mean, se, n) in rates.items()}


def paired_lines(
    name: str, reference: dict[str, dict[str, float]], other: dict[str, dict[str, float]]
) -> list[str]:
    """`other` minus `reference` for each rate both have, paired over the tasks both scored
    (a behaviour that does not apply to a task, `recovered` without a failing run, leaves
    the task out of that rate's pair; a rate with no task in common is left out)."""
    lines = [f"== {name} minus the first checkpoint, paired over tasks (± paired s.e. (tasks)):"]
    for rate in reference:
        if rate in other:
            mean, se, n = paired_margin(reference[rate], other[rate])
            if n:
                lines.append(f"    {rate}: {format_se(mean, se, sign=True)} ({n})")
    return lines


def _counts(values: Iterable[str]) -> str:
    counted = Counter(values)
    total = sum(counted.values())
    return ", ".join(f"{k} {v} ({v / total:.2f})" for k, v in counted.most_common()) or "none"


def missing_name_source(path: str, task: Task) -> str:
    """Where the name of a read that found no file comes from: "in the task" when its stem
    (the file name without `.py`) is a word of the instruction or of a file's path, else
    "nowhere in the task" (a name recalled from training, or a blend)."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    text = task.instruction + " " + " ".join(task.files)
    return "in the task" if re.search(rf"\b{re.escape(stem)}\b", text) else "nowhere in the task"


def read_after_listing(calls: list[ToolCall]) -> list[str]:
    """For each failed read, then a listing, then a read: what that read found ("right
    file", "same missing path", "another missing path")."""
    found = []
    for before, listing, after in zip(calls, calls[1:], calls[2:], strict=False):
        if (before.name, listing.name, after.name) != ("read_file", "list_files", "read_file"):
            continue
        if before.ok or before.malformed or after.malformed:
            continue
        same = after.arguments.get("path") == before.arguments.get("path")
        found.append(
            "right file" if after.ok else "same missing path" if same else "another missing path"
        )
    return found


def describe(name: str, results: list[EpisodeResult], tokenizer: ComposerTokenizer) -> str:
    """The counts of one checkpoint's episodes, as printed lines."""
    n = len(results)
    calls = [c for r in results for c in r.calls]
    reads = [c for c in calls if c.name == "read_file" and not c.malformed]
    commands = Counter(
        (str(c.arguments.get("command", "")).split() or [""])[0] for c in calls if c.name == "run"
    )
    stops = Counter(r.stop_reason for r in results)
    solved = mean_se([float(r.solved) for r in results])
    lines = [
        f"== {name}: {n} greedy episodes, solved {solved[0]:.3f} ± {solved[1]:.3f}",
        "  stopped by: " + ", ".join(f"{k} {v} ({v / n:.2f})" for k, v in stops.most_common()),
        f"  calls a episode {len(calls) / n:.2f}; malformed {sum(c.malformed for c in calls) / n:.2f}",
        "  calls by tool: "
        + ", ".join(
            f"{k} {v}"
            for k, v in Counter(
                "(malformed)" if c.malformed else c.name for c in calls
            ).most_common(8)
        ),
        f"  reads that failed: {sum(not c.ok for c in reads)} of {len(reads)}",
        "  missing names: "
        + _counts(
            missing_name_source(str(c.arguments.get("path", "")), r.task)
            for r in results
            for c in r.calls
            if c.name == "read_file" and not c.malformed and not c.ok
        ),
        "  the read after a failed read and a listing: "
        + _counts(found for r in results for found in read_after_listing(r.calls)),
        "  run commands by first word: "
        + ", ".join(f"{k or '(empty)'} {v}" for k, v in commands.most_common(6)),
        "  behaviour rates (mean over tasks ± s.e. (tasks)):",
        *(f"    {k}: {v}" for k, v in _rates(results, tokenizer).items()),
    ]
    cut = [r for r in results if r.stop_reason == "max_turns"]
    if cut:
        lines.append(f"  among the {len(cut)} cut by the turn limit:")
        lines += [f"    {k}: {v}" for k, v in _rates(cut, tokenizer).items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, nargs="*", default=[], help="checkpoints")
    parser.add_argument("--split", default="validation_words", choices=sorted(SPLITS))
    parser.add_argument("--per-template", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="the episodes' calls here (JSON lines)")
    parser.add_argument("--quick", action="store_true", help="a random tiny model, 1 a template")
    args = parser.parse_args()
    models = list(args.models)
    if args.quick or not models:
        models = [random_checkpoint(Path(tempfile.mkdtemp(prefix="episode-ends-")))]
        args.per_template = 1
    for model in models:
        if not (model / "tokenizer.json").is_file():
            print(f"error: {model} has no tokenizer.json: give a stage-one checkpoint",
                  file=sys.stderr)  # fmt: skip
            return 2
    tasks = SPLITS[args.split](args.per_template, seed=0)
    runner = RLConfig().rollout.model_copy(update={"temperature": 0.0})
    print(f"{len(tasks)} {args.split} tasks, turn limit {runner.max_turns}")
    rows = []
    per_task: list[dict[str, dict[str, float]]] = []
    for model in models:
        config = EvalConfig(samples=1, runner=runner, tasks_per_step=len(tasks))
        _, results = run_eval(model, tasks, config, args.threads)
        tokenizer = ComposerTokenizer.from_file(model / "tokenizer.json")
        print(describe(str(model), results, tokenizer), flush=True)
        per_task.append(per_task_rates(results, tokenizer))
        rows += [
            {
                "model": str(model),
                "task": r.task.id,
                "stop": r.stop_reason,
                "solved": r.solved,
                "calls": [[c.name, c.arguments, c.ok, c.malformed] for c in r.calls],
            }
            for r in results
        ]
    for model, rates in zip(models[1:], per_task[1:], strict=True):
        print("\n".join(paired_lines(str(model), per_task[0], rates)), flush=True)
    baselines = baseline_scores(tasks, runner, like=models[0], threads=args.threads)
    for name, scores in baselines.items():
        print(f"== baseline {name}: solved {format_se(*scores.pass1())}", flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
