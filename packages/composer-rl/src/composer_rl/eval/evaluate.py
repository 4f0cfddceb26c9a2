"""`composer-rl eval`: run a checkpoint on held-out tasks and score what it did.

For every task, `samples` episodes run in sandboxes (in parallel, batched through one
inference engine); the hidden tests decide pass or fail. Reported per category, per
difficulty and overall: pass@1 and unbiased pass@k, mean reward components from the
composer-rewards plugins, tokens per episode, the rate of well-formed tool calls and the
rate of syntactically valid Python in the files the model wrote.
"""

from __future__ import annotations

import ast
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy
import torch

from composer_model import ComposerTokenizer, InferenceEngine, load_pretrained
from composer_rewards import builtin_plugins, hookspecs, score_episode
from composer_rl.agent.episode import EpisodeResult, EpisodeRunner, RunnerConfig, episode_view
from composer_rl.eval.passk import pass_at_k
from composer_rl.tasks.model import Task


@dataclass
class EvalConfig:
    samples: int = 1
    k_values: tuple[int, ...] = (1,)
    max_batch_size: int = 16
    max_seq_len: int = 1024
    runner: RunnerConfig | None = None


def reward_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("composer")
    pm.add_hookspecs(hookspecs)
    for name, plugin in builtin_plugins().items():
        pm.register(plugin, name=name)
    return pm


def python_validity(result: EpisodeResult) -> tuple[int, int]:
    """(valid, total) over the .py files the episode created or changed."""
    valid = total = 0
    for path, text in result.files_after.items():
        if path.endswith(".py") and result.task.files.get(path) != text:
            total += 1
            try:
                ast.parse(text)
                valid += 1
            except SyntaxError:
                pass
    return valid, total


def _group_rows(
    results: list[EpisodeResult], key: str, k_values: Iterable[int], samples: int
) -> dict[str, dict[str, Any]]:
    by_task: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        by_task[r.task.id].append(r)
    groups: dict[str, list[list[EpisodeResult]]] = defaultdict(list)
    for episodes in by_task.values():
        task = episodes[0].task
        label = {
            "all": "all",
            "category": task.category.value,
            "difficulty": f"difficulty {task.difficulty}",
        }[key]
        groups[label].append(episodes)
    rows: dict[str, dict[str, Any]] = {}
    for label, tasks in sorted(groups.items()):
        row: dict[str, Any] = {"tasks": len(tasks)}
        for k in k_values:
            if k <= samples:
                row[f"pass@{k}"] = statistics.fmean(
                    pass_at_k(len(eps), sum(e.solved for e in eps), k) for eps in tasks
                )
        rows[label] = row
    return rows


def summarize(
    results: list[EpisodeResult],
    tokenizer: ComposerTokenizer,
    config: EvalConfig,
    seconds: float,
) -> dict[str, Any]:
    pm = reward_manager()
    components: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []
    plugin_failures = 0
    for r in results:
        score = score_episode(pm, episode_view(r, tokenizer))
        totals.append(score.total)
        plugin_failures += len(score.failures)
        for sc in score.components:
            components[sc.component.name].append(sc.component.weighted)
    valid = total_py = 0
    for r in results:
        v, t = python_validity(r)
        valid += v
        total_py += t
    calls = [c for r in results for c in r.calls]
    stops: dict[str, int] = defaultdict(int)
    for r in results:
        stops[r.stop_reason] += 1
    return {
        "episodes": len(results),
        "tasks": len({r.task.id for r in results}),
        "samples_per_task": config.samples,
        "seconds": seconds,
        "overall": _group_rows(results, "all", config.k_values, config.samples)["all"],
        "by_category": _group_rows(results, "category", config.k_values, config.samples),
        "by_difficulty": _group_rows(results, "difficulty", config.k_values, config.samples),
        "reward_total_mean": statistics.fmean(totals) if totals else 0.0,
        "reward_components_mean": {k: statistics.fmean(v) for k, v in sorted(components.items())},
        "reward_plugin_failures": plugin_failures,
        "tokens_per_episode": statistics.fmean(r.generated_tokens for r in results)
        if results
        else 0.0,
        "tool_calls_per_episode": statistics.fmean(len(r.calls) for r in results)
        if results
        else 0.0,
        "well_formed_call_rate": (sum(c.call.ok for c in calls) / len(calls)) if calls else 0.0,
        "python_files_written": total_py,
        "valid_python_rate": (valid / total_py) if total_py else None,
        "finished_rate": statistics.fmean(r.finished for r in results) if results else 0.0,
        "stop_reasons": dict(stops),
    }


def run_eval(
    checkpoint: Path, tasks: list[Task], config: EvalConfig, threads: int | None = None
) -> tuple[dict[str, Any], list[EpisodeResult]]:
    if threads:
        torch.set_num_threads(threads)
    tokenizer_path = checkpoint / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise FileNotFoundError(
            f"{checkpoint}: no tokenizer.json; give a stage-one 'final' directory"
        )
    tokenizer = ComposerTokenizer.from_file(tokenizer_path)
    model = load_pretrained(checkpoint)
    engine = InferenceEngine(
        model, tokenizer, max_batch_size=config.max_batch_size, max_seq_len=config.max_seq_len
    )
    runner_config = config.runner or RunnerConfig(temperature=0.0 if config.samples == 1 else 0.8)
    began = time.monotonic()
    results = EpisodeRunner(engine, tokenizer, runner_config).run(tasks, config.samples)
    summary = summarize(results, tokenizer, config, time.monotonic() - began)
    summary["checkpoint"] = str(checkpoint)
    return summary, results


def write_report(summary: dict[str, Any], results: list[EpisodeResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    episodes = [
        {
            "task": r.task.id,
            "category": r.task.category.value,
            "difficulty": r.task.difficulty,
            "sample": r.sample,
            "solved": r.solved,
            "stop_reason": r.stop_reason,
            "generated_tokens": r.generated_tokens,
            "calls": [
                {"name": c.call.name, "ok": c.ok, "well_formed": c.call.ok, "error": c.error}
                for c in r.calls
            ],
            "transcript": r.transcript.text,
        }
        for r in results
    ]
    path.write_text(json.dumps({"summary": summary, "episodes": episodes}, indent=2) + "\n")
