"""`composer-rl eval`: run a checkpoint on held-out tasks and score what it did.

For every task, `samples` episodes run in sandboxes (in parallel, batched through one
inference engine); the hidden tests decide pass or fail. Reported per category, per
difficulty and overall: pass@1 and unbiased pass@k, mean reward components from the
composer-rewards plugins, tokens per episode, the rate of well-formed tool calls and the
rate of syntactically valid Python in the files the model wrote. Every pass@k and every
mean score comes with its standard error over tasks (`composer_rl.eval.stats`).

The episodes run in steps of `tasks_per_step` tasks. With a `run_dir`, each step begins at
a plugin step boundary (`composer_rl.plugins.PluginSession`): `composer-rl plugins
add|remove --run RUN_DIR` change the reward and monitor plugins of a running evaluation,
each step's episodes are scored right after they finish, and one line a step goes to
``RUN_DIR/metrics.jsonl``. The plugins are the job's `composer_rl.plugins.JobPlugins`
(`EvalConfig.job`, or one built once from the plugin sections, `EvalConfig.plugin_run_config`:
built-ins, installed entry points, the ``[plugins]`` specs and block list, configured): they
score the episodes and the sandbox backend is looked up in them.

Suites: `heldout` (the held-out split, sampled per template) and `bench` (the frozen
CursorBench-style set of `composer_rl.eval.bench` plus the five side evals of
`composer_rl.eval.side`, each scored on its own).

Baselines (`EvalConfig.baselines`): the do-nothing and random policies of
`composer_rl.eval.baseline_checkpoints` run the same tasks through this same function, and
the report holds their scores and per-task values beside the policy's, so every table can
print what a policy that does nothing useful earns and the lift over it
(`composer_rl.eval.lift`).
"""

from __future__ import annotations

import ast
import json
import math
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from composer_model import ComposerTokenizer, InferenceEngine, load_pretrained, set_threads
from composer_rewards import EpisodeScore, PluginScorer
from composer_rl.agent.episode import EpisodeResult, RunnerConfig, episode_view
from composer_rl.eval.baseline_checkpoints import (
    CONFIG_FILE,
    BaselineName,
    FinishAtOnceEngine,
    baseline_checkpoint,
    is_scripted,
)
from composer_rl.eval.passk import pass_at_k
from composer_rl.eval.side import SIDE_VERSION, InterruptingRunner, side_scores
from composer_rl.eval.stats import mean_se
from composer_rl.plugins import JobPlugins, PluginSections, PluginSession
from composer_rl.progress import Show, StepProgress
from composer_rl.tasks.model import Task


class EvalConfig(PluginSections):
    """How episodes are played and scored: samples a task, pass@k, the engine's batch and
    context, the runner, the plugins (`PluginSections`), and the baselines scored beside.

    The defaults are the library's; `composer-rl eval` adds what to evaluate and changes
    two of them (`composer_rl.cli.eval.EvalCommandConfig`: the baselines on, the runner's
    temperature chosen from `samples`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    samples: int = Field(default=1, ge=1, description="episodes a task (n of pass@k)")
    k_values: tuple[int, ...] = Field(
        default=(1,), min_length=1, description="the k of pass@k, each at most `samples`"
    )
    max_batch_size: int = Field(default=16, ge=1, description="episodes decoded together")
    max_seq_len: int = Field(
        default=1024, ge=64, description="the engine's context in tokens (episodes end there)"
    )
    runner: RunnerConfig | None = Field(
        default=None,
        description="how episodes are played (none: the default runner, greedy for one "
        "sample a task and at temperature 0.8 for more)",
    )
    run_dir: Path | None = Field(
        default=None,
        description="with one, plugin requests (`composer-rl plugins add|remove --run`) apply "
        "between steps and metrics.jsonl is written there",
    )
    tasks_per_step: int = Field(
        default=0, ge=0, description="tasks a step (0: one decode batch, max_batch_size // samples)"
    )
    show_progress: Show = Field(
        default="lines",
        description="progress of the episodes as they are graded "
        "(`composer_rl.progress.Show`): plain lines, so a log of a long pass shows "
        "where it is",
    )
    baselines: tuple[BaselineName, ...] = Field(
        default=(),
        description="baseline policies scored on the same tasks (do_nothing, random), under "
        "the report's `baselines`; none by default in the library: each costs another pass "
        "over the tasks, which callers comparing two checkpoints of their own "
        "(`composer_rl.rl.compare`) do not need",
    )
    job: JobPlugins | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="the job's plugins (one manager for rewards, monitors and sandbox "
        "backends), no setting: none, `run_eval` builds them once from the plugin sections "
        "and its baselines share them",
    )

    @model_validator(mode="after")
    def _k_within_samples(self) -> EvalConfig:
        bad = [k for k in self.k_values if not 1 <= k <= self.samples]
        if bad:
            raise ValueError(
                f"k_values: pass@k needs 1 <= k <= samples ({self.samples}); got {bad}"
            )
        return self


BASELINE_KEYS = (
    "checkpoint",
    "episodes",
    "overall",
    "by_category",
    "by_difficulty",
    "side_evals",
    "per_task",
    "reward_total_mean",
    "reward_total_se",
    "finished_rate",
)
"""What of a baseline's own summary the policy's report keeps."""


def job_plugins(config: EvalConfig) -> JobPlugins:
    """`config.job`, or the job's plugins built from the plugin sections."""
    return config.job if config.job is not None else JobPlugins(config.plugin_run_config())


def plugin_scorer(config: EvalConfig) -> PluginScorer:
    """A scorer over the job's plugin manager, for scoring without a run directory."""
    session_settings = PluginSession.settings_of(config.plugin_run_config())
    return PluginScorer(
        job_plugins(config).pm,
        strict=session_settings.strict,
        budget_s=session_settings.hook_budget_s,
        over_budget=session_settings.over_budget,
    )


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
                row[f"pass@{k}"], row[f"pass@{k}_se"] = mean_se(
                    pass_at_k(len(eps), sum(e.solved for e in eps), k) for eps in tasks
                )
        rows[label] = row
    return rows


def per_task_values(
    results: list[EpisodeResult],
    k_values: Iterable[int],
    samples: int,
    side: dict[str, dict[str, Any]],
) -> dict[str, dict[str, float]]:
    """{metric: {task (or side-eval unit): value}}: pass@k of each scored task and each side
    eval's per-unit score, what the lift over a baseline is paired on."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        by_task[r.task.id].append(r.solved)
    out: dict[str, dict[str, float]] = {}
    for k in k_values:
        if k <= samples:
            out[f"pass@{k}"] = {t: pass_at_k(len(v), sum(v), k) for t, v in by_task.items()}
    for name, row in side.items():
        out[f"side: {name}"] = dict(row.get("per_unit", {}))
    return out


def summarize(
    results: list[EpisodeResult],
    tokenizer: ComposerTokenizer,
    config: EvalConfig,
    seconds: float,
    scores: list[EpisodeScore] | None = None,
) -> dict[str, Any]:
    """The report's summary; `scores` (one per result) are made here when not given."""
    if scores is None:
        scorer = plugin_scorer(config)
        scores = [scorer.score(episode_view(r, tokenizer)) for r in results]
    side = side_scores(results)
    kept = [
        (r, score)
        for r, score in zip(results, scores, strict=True)
        if "side_eval" not in r.task.metadata
    ]
    results = [r for r, _ in kept]
    components: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    totals: dict[str, list[float]] = defaultdict(list)
    plugin_failures = 0
    for r, score in kept:
        totals[r.task.id].append(score.total)
        plugin_failures += len(score.failures)
        for sc in score.components:
            components[sc.component.name][r.task.id].append(sc.component.weighted)
    reward_total = mean_se(statistics.fmean(v) for v in totals.values())
    reward_components = {
        name: mean_se(statistics.fmean(v) for v in per_task.values())
        for name, per_task in sorted(components.items())
    }
    valid = total_py = 0
    for r in results:
        v, t = python_validity(r)
        valid += v
        total_py += t
    component_episodes = {
        name: sum(len(v) for v in per_task.values()) for name, per_task in components.items()
    }
    calls = [c for r in results for c in r.calls]
    stops: dict[str, int] = defaultdict(int)
    for r in results:
        stops[r.stop_reason] += 1
    return {
        "episodes": len(results),
        "tasks": len({r.task.id for r in results}),
        "samples_per_task": config.samples,
        "seconds": seconds,
        "overall": _group_rows(results, "all", config.k_values, config.samples).get(
            "all", {"tasks": 0}
        ),
        "by_category": _group_rows(results, "category", config.k_values, config.samples),
        "by_difficulty": _group_rows(results, "difficulty", config.k_values, config.samples),
        "reward_total_mean": reward_total[0],
        "reward_total_se": reward_total[1],
        "reward_components_mean": {k: v[0] for k, v in reward_components.items()},
        "reward_components_se": {k: v[1] for k, v in reward_components.items()},
        "reward_components_episodes": dict(sorted(component_episodes.items())),
        "per_task": per_task_values(results, config.k_values, config.samples, side),
        "side_evals": side,
        "side_version": SIDE_VERSION if side else None,
        "reward_plugin_failures": plugin_failures,
        "tokens_per_episode": statistics.fmean(r.generated_tokens for r in results)
        if results
        else 0.0,
        "tool_calls_per_episode": statistics.fmean(len(r.calls) for r in results)
        if results
        else 0.0,
        "well_formed_call_rate": (sum(not c.malformed for c in calls) / len(calls))
        if calls
        else 0.0,
        "python_files_written": total_py,
        "valid_python_rate": (valid / total_py) if total_py else None,
        "finished_rate": statistics.fmean(r.finished for r in results) if results else 0.0,
        "stop_reasons": dict(stops),
    }


def run_eval(
    checkpoint: Path, tasks: list[Task], config: EvalConfig, threads: int | None = None
) -> tuple[dict[str, Any], list[EpisodeResult]]:
    set_threads(threads)
    tokenizer_path = checkpoint / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise FileNotFoundError(
            f"{checkpoint}: no tokenizer.json; give a stage-one 'final' directory"
        )
    plugins = job_plugins(config)
    config = config.model_copy(update={"job": plugins})  # the baselines share the manager
    tokenizer = ComposerTokenizer.from_file(tokenizer_path)
    engine = policy_engine(checkpoint, tokenizer, config)
    runner_config = config.runner or RunnerConfig(temperature=0.0 if config.samples == 1 else 0.8)
    began = time.monotonic()
    if config.run_dir is None:
        scorer = plugin_scorer(config)
        results, scores = _run_steps(engine, tokenizer, runner_config, tasks, config, scorer)
    else:
        with PluginSession(
            config.plugin_run_config(),
            config.run_dir,
            command="eval",
            plugins=plugins,
            resume_after_finish=False,
        ) as session:
            results, scores = _run_steps(
                engine, tokenizer, runner_config, tasks, config, session.scorer, session
            )
    summary = summarize(results, tokenizer, config, time.monotonic() - began, scores)
    summary["checkpoint"] = str(checkpoint)
    summary["command"] = command_line()
    if config.baselines:
        summary["baselines"] = baseline_summaries(checkpoint, tasks, config, threads)
    return summary, results


def policy_engine(
    checkpoint: Path, tokenizer: ComposerTokenizer, config: EvalConfig
) -> InferenceEngine:
    """The engine that plays `checkpoint`'s policy: the model's, or for a scripted baseline
    (`baseline_checkpoints.is_scripted`) the engine that finishes at once."""
    if is_scripted(checkpoint):
        scripted = FinishAtOnceEngine(tokenizer, config.max_batch_size, config.max_seq_len)
        # It has every member of the engine the runner uses (see its docstring).
        return scripted  # type: ignore[return-value]
    model = load_pretrained(checkpoint)
    return InferenceEngine(
        model, tokenizer, max_batch_size=config.max_batch_size, max_seq_len=config.max_seq_len
    )


def baseline_summaries(
    checkpoint: Path, tasks: list[Task], config: EvalConfig, threads: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each of `config.baselines` run on `tasks` with `config`'s runner and plugins (through
    `run_eval`, so through the same runner and grading), its tokenizer and architecture
    those of `checkpoint` (a random tiny model's when `checkpoint` has no config.json)."""
    out: dict[str, dict[str, Any]] = {}
    seed = config.runner.seed if config.runner is not None else 0
    plain = config.model_copy(update={"baselines": (), "run_dir": None})
    with tempfile.TemporaryDirectory(prefix="eval-baselines-") as tmp:
        for name in config.baselines:
            # do-nothing needs only the tokenizer; random needs the architecture too.
            has_model = (Path(checkpoint) / CONFIG_FILE).is_file()
            like = checkpoint if name == "do_nothing" or has_model else None
            path = baseline_checkpoint(name, Path(tmp), like=like, seed=seed)
            summary, _ = run_eval(path, tasks, plain, threads)
            summary["checkpoint"] = f"{name} baseline (tokenizer of {checkpoint})"
            out[name] = {k: summary[k] for k in BASELINE_KEYS if k in summary}
    return out


def command_line() -> str:
    """The command this process was started as, as a reader would retype it."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if program in ("__main__.py", "-c", ""):
        program = "python -m composer_rl.cli"
    return shlex.join([program, *sys.argv[1:]])


def _run_steps(
    engine: InferenceEngine,
    tokenizer: ComposerTokenizer,
    runner_config: RunnerConfig,
    tasks: list[Task],
    config: EvalConfig,
    scorer: PluginScorer,
    session: PluginSession | None = None,
) -> tuple[list[EpisodeResult], list[EpisodeScore]]:
    """Run and score the episodes step by step; plugin requests apply between steps."""
    per_step = config.tasks_per_step or max(1, config.max_batch_size // config.samples)
    results: list[EpisodeResult] = []
    scores: list[EpisodeScore] = []
    temperature = "greedy" if runner_config.temperature == 0 else f"T={runner_config.temperature:g}"
    progress = StepProgress(
        f"scoring ({temperature})",
        len(tasks) * config.samples,
        unit="episodes",
        show=config.show_progress,
        stream=sys.stderr,  # stdout stays the report's
    )
    with progress:
        for step, start in enumerate(range(0, len(tasks), per_step)):
            plugin_metrics = session.step_boundary(step) if session is not None else {}
            # A seed per step, so that sampled episodes of different steps differ.
            step_runner = runner_config.model_copy(
                update={"seed": runner_config.seed + 7919 * step}
            )
            before = len(results)

            def graded(count: int, before: int = before) -> None:
                progress.update(before + count)

            backends = job_plugins(config).backends
            chunk = InterruptingRunner(engine, tokenizer, step_runner, backends).run(
                tasks[start : start + per_step], config.samples, on_episode=graded
            )
            chunk_scores = [scorer.score(episode_view(r, tokenizer)) for r in chunk]
            results += chunk
            scores += chunk_scores
            if session is not None:
                _log_step(session, step, chunk, chunk_scores, plugin_metrics)
    return results, scores


def _log_step(
    session: PluginSession,
    step: int,
    chunk: list[EpisodeResult],
    scores: list[EpisodeScore],
    plugin_metrics: dict[str, float],
) -> None:
    """One line of ``RUN_DIR/metrics.jsonl``: the step's rewards, flags and plugin events."""
    values: dict[str, list[float]] = defaultdict(list)
    for score in scores:
        for key, value in score.metrics().items():
            values[key].append(value)
    record = {
        "step": step,
        "episodes": len(chunk),
        "solved": sum(r.solved for r in chunk),
        **{key: statistics.fmean(v) for key, v in sorted(values.items())},
        **plugin_metrics,
        "plugin_events": [e.model_dump() for e in session.events],
    }
    with (session.run_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


def write_report(summary: dict[str, Any], results: list[EpisodeResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    episodes = [
        {
            "task": r.task.id,
            "category": r.task.category.value,
            "difficulty": r.task.difficulty,
            "sample": r.sample,
            "solved": r.solved,
            "side_eval": r.task.metadata.get("side_eval"),
            "final_message": r.final_message,
            "stop_reason": r.stop_reason,
            "generated_tokens": r.generated_tokens,
            "calls": [
                {"name": c.name, "ok": c.ok, "well_formed": not c.malformed, "error": c.error}
                for c in r.calls
            ],
            "transcript": r.transcript.text,
        }
        for r in results
    ]
    report = _finite({"summary": summary, "episodes": episodes})
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    """NaN (an undefined standard error) as null, so the report is strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def load_summary(path: Path) -> dict[str, Any]:
    """The summary of a report `write_report` wrote (null standard errors back to NaN)."""
    try:
        data = json.loads(Path(path).read_text())
        summary = data["summary"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: not an evaluation report written by composer-rl eval ({exc})"
        ) from exc
    return dict(_nan_back(summary))


def _nan_back(value: Any, key: str = "") -> Any:
    if value is None and key.endswith("_se"):
        return math.nan
    if isinstance(value, dict):
        return {k: _nan_back(v, key if key.endswith("_se") else k) for k, v in value.items()}
    return value
