"""``composer-rl eval``: pass@1 / pass@k of a checkpoint on held-out tasks, the frozen bench
with its five side evals (``--suite bench``), or two checkpoints side by side
(``--compare A B``).

Its settings are `EvalCommandConfig` (`composer_rl.config`: the TOML file and the
``--section.field`` flags every command reads): the evaluation's own (`EvalConfig`, with
the runner as ``[runner]`` and the plugins' sections) and what to evaluate."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from composer_rl.agent.episode import RunnerConfig
from composer_rl.config import CommandConfig, add_flags, load_args
from composer_rl.errors import ConfigError, require_model_dir
from composer_rl.eval.baseline_checkpoints import BaselineName
from composer_rl.eval.evaluate import EvalConfig

if TYPE_CHECKING:
    from composer_rl.plugins import JobPlugins


class EvalCommandConfig(CommandConfig, EvalConfig):
    """`composer-rl eval`: what to evaluate (a checkpoint, two side by side, a suite, a
    split) and how (`EvalConfig`: samples, pass@k, the runner, the plugins). The run-wide
    `seed`, `sandbox` and `temperature` are set into the ``[runner]`` section."""

    checkpoint: Path = Field(
        default=Path("runs/stage1/sft/final"),
        description="a model directory with tokenizer.json (the default: stage one's SFT result)",
    )
    compare: tuple[Path, Path] | None = Field(
        default=None,
        description="two checkpoints (or eval JSON reports) to run on the same tasks and "
        "print side by side, e.g. the SFT and the RL checkpoint; replaces checkpoint",
    )
    suite: Literal["heldout", "bench"] = Field(
        default="heldout",
        description="heldout: the held-out split, sampled per template; bench: the frozen "
        "CursorBench-style set plus the five side evals",
    )
    tasks: Path | None = Field(
        default=None, description="task directory or JSONL instead of the built-ins"
    )
    split: Literal["heldout", "train"] = Field(
        default="heldout", description="split of --suite heldout"
    )
    per_template: int = Field(
        default=4, ge=0, description="tasks per template for --suite heldout (0: all)"
    )
    temperature: float | None = Field(
        default=None,
        ge=0,
        description="the runner's sampling temperature (none: 0, greedy, for one sample a "
        "task; 0.8 for more)",
    )
    seed: int = Field(default=0, description="seed of the task sample and the sampling")
    sandbox: str | None = Field(default=None, description="sandbox backend (none: bwrap)")
    threads: int | None = Field(default=None, ge=1, description="torch threads")
    out: Path | None = Field(
        default=None,
        description="the JSON report (none: eval_<suite>.json next to the checkpoint)",
    )
    run_dir: Path | None = Field(
        default=None,
        description="where plugins/ and metrics.jsonl go; `composer-rl plugins add|remove "
        "--run` changes a running evaluation's plugins between steps (none: the report's "
        "path without .json)",
    )
    runner: RunnerConfig = Field(
        default_factory=RunnerConfig,
        description="how episodes are played (composer_rl.agent.episode.RunnerConfig)",
    )
    baselines: tuple[BaselineName, ...] = Field(
        default=("do_nothing", "random"),
        description="baseline policies scored on the same tasks and printed beside",
    )

    flag_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "k_values": ("--k",),
        "max_batch_size": ("--batch",),
        "sandbox": ("--backend",),
        "runner.max_turns": ("--max-turns",),
        "runner.max_new_tokens": ("--max-new-tokens",),
        "runner.grading_workers": ("--workers",),
    }
    derived: ClassVar[Mapping[str, str]] = {
        "show_progress": "the command's (progress lines on stderr)",
        "runner.seed": "the top-level `seed`",
        "runner.backend": "the top-level `sandbox`",
        "runner.temperature": "the top-level `temperature`",
        "job": "the command's (the plugins built once from the plugin sections)",
    }

    @model_validator(mode="after")
    def _share_run_wide_knobs(self) -> EvalCommandConfig:
        """Set the run-wide knobs into the runner (`derived`)."""
        temperature = self.temperature
        if temperature is None:
            temperature = 0.0 if self.samples == 1 else 0.8
        runner = self.runner.model_copy(
            update={"seed": self.seed, "backend": self.sandbox, "temperature": temperature}
        )
        self._share(runner=runner)
        return self


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a checkpoint on the held-out split (pass@k, rewards, tokens)",
        description=(
            "Scores a checkpoint (or two, --compare) on held-out tasks or the frozen bench. "
            "Every setting is a flag (--section.field) or a key of a TOML file given with "
            "--config, which holds the reward and monitor plugins' sections too ([plugins], "
            "[rewards.<name>], [monitors.<name>], [plugin_config]); flags win over the file, "
            "the file over the defaults."
        ),
    )
    add_flags(parser, EvalCommandConfig)
    parser.set_defaults(handler=main)


def _tasks(config: EvalCommandConfig, plugins: JobPlugins) -> tuple[str, list[Any]]:
    """(suite label, tasks) for the command line; a split's tasks include those of the
    job's plugin task sources."""
    from composer_rl.eval.bench import BENCH_VERSION, bench_tasks
    from composer_rl.eval.side import side_tasks
    from composer_rl.tasks import DirectoryTaskSource, Split, collect_tasks, sample_tasks

    if config.suite == "bench":
        return BENCH_VERSION, bench_tasks() + side_tasks()
    sources = [DirectoryTaskSource("user", config.tasks)] if config.tasks else None
    tasks = collect_tasks(Split(config.split), sources, pm=plugins.pm)
    if config.per_template:
        tasks = sample_tasks(tasks, config.per_template, seed=config.seed)
    if not tasks:
        raise ConfigError(f"no {config.split} tasks found")
    return config.split, tasks


def main(args: argparse.Namespace) -> int:
    from composer_rl.eval import print_summary, run_eval, write_report
    from composer_rl.eval.evaluate import load_summary
    from composer_rl.eval.table import print_comparison
    from composer_rl.plugins import JobPlugins

    config = load_args(EvalCommandConfig, args)
    _check_paths(config)
    plugins = JobPlugins(config.plugin_run_config())  # the job's one manager, every kind
    config = config.model_copy(update={"job": plugins})
    suite, tasks = _tasks(config, plugins)

    def evaluate(checkpoint: Path, out: Path | None) -> dict[str, Any]:
        if checkpoint.is_file() and checkpoint.suffix == ".json":
            try:
                return load_summary(checkpoint)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        report = out or checkpoint.parent / f"eval_{suite}.json"
        # plugins/ and metrics.jsonl of this evaluation (`composer-rl plugins ... --run`).
        run_dir = (
            config.run_dir if config.run_dir and not config.compare else report.with_suffix("")
        )
        summary, results = run_eval(
            checkpoint, tasks, config.model_copy(update={"run_dir": run_dir}), config.threads
        )
        summary["suite"] = suite
        write_report(summary, results, report)
        print(f"report: {report}")
        return summary

    if config.compare:
        a_path, b_path = config.compare
        a, b = evaluate(a_path, None), evaluate(b_path, None)
        if a.get("suite", "heldout") != b.get("suite", "heldout"):
            raise ConfigError(
                f"A was evaluated on {a.get('suite', 'heldout')!r} and B on "
                f"{b.get('suite', 'heldout')!r}; compare results of the same suite"
            )
        print_comparison(a, b, (str(a_path), str(b_path)))
        return 0
    summary = evaluate(config.checkpoint, config.out)
    print_summary(summary)
    return 0


def _check_paths(config: EvalCommandConfig) -> None:
    """The checks of paths that need no model and no sandbox, made before either is
    loaded (the values were checked as the configuration was read): a ConfigError naming
    the setting (one line, exit status 2)."""
    if config.tasks is not None and not config.tasks.exists():
        raise ConfigError(f"--tasks {config.tasks} does not exist: give a task directory or JSONL")
    if config.suite == "bench" and config.tasks:
        raise ConfigError("--suite bench is a fixed set; drop --tasks")
    hint = "a model directory with tokenizer.json (e.g. runs/stage1/sft/final)"
    if config.compare:
        for path in config.compare:
            if not (path.is_file() and path.suffix == ".json"):
                require_model_dir(path, "--compare", hint + " or an eval JSON report")
    else:
        require_model_dir(config.checkpoint, "--checkpoint", hint)
