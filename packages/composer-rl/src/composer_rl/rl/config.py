"""The RL run's configuration: typed, validated, loadable from TOML, one flag per knob.

`RLConfig` is `composer-rl rl`'s `CommandConfig` (`composer_rl.config`: one loader and one
flag scheme for every command): a TOML file gives any subset of its settings and flags
override the file (`--section.field value`). An unknown key or a bad value is an error that
names the key and what it accepts, never a silent default.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_rl.agent.episode import RunnerConfig
from composer_rl.agent.summarize import SummaryConfig
from composer_rl.config import CommandConfig, ConfigError, add_flags, load, load_args, to_toml
from composer_rl.plugins.settings import PluginSections
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.orchestrator import OrchestratorConfig
from composer_rl.rl.services.training import TrainingConfig
from composer_rl.tasks.model import Category


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RolloutConfig(RunnerConfig):
    """RL's rollouts: the episode runner's settings for the groups (a section of its own,
    with RL's defaults: sampled at temperature 1, routing recorded for router replay, self
    summaries on) and the inference engine's batch and context."""

    temperature: float = Field(
        default=1.0, gt=0, description="sampling temperature (the loss uses the same)"
    )
    grading_workers: int = Field(
        default=2, ge=1, description="sandboxes graded at once, beside the decoding"
    )
    record_routing: bool = Field(default=True, description="needed for router replay")
    summary: SummaryConfig | None = Field(
        default_factory=SummaryConfig,
        description="self-summarization of a full context (composer_rl.agent.summarize); "
        "context_budget none: no summaries, the episode ends at max_seq_len",
    )
    max_batch_size: int = Field(default=24, ge=1, description="episodes decoded together")
    max_seq_len: int = Field(default=2048, ge=64, description="as stage one's SFT rows")
    compile_decode: bool = Field(
        default=False,
        description="capture the engine's decode step with torch.compile (same results; "
        "pays at small decode batches, falls back to eager if capture fails)",
    )


class TasksSection(_Section):
    """The training tasks: where they come from, how many, and the sampler's mix."""

    per_template: int = Field(
        default=0, ge=0, description="training tasks per template (0: every one)"
    )
    source: Path | None = Field(default=None, description="task directory instead of built-ins")
    builtin: bool = Field(
        default=True,
        description="train on the built-in templates when tasks.source is unset (false: only "
        "the task sources of plugins, `composer_task_sources`, which are always added)",
    )
    mix: dict[Category, float] | None = Field(
        default=None,
        description="category weights of the sampler (None: composer_rl.tasks.TaskMix's "
        "defaults, feature iteration the largest share)",
    )
    invented_names: Literal["off", "syllables", "words", "wide_words"] = Field(
        default="off",
        description="rename training tasks with invented names (composer_rl.tasks.invented) "
        "so that a name is right only when copied from the instruction, as on a held-out "
        "task: words of 3,527 no task uses (wide_words), the 371 words demonstrations are "
        "named with (words) or syllable strings; never the validation split's words",
    )
    invented_share: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="share of the renamable training tasks renamed (tasks.invented_names)",
    )


class EvalSection(_Section):
    """The final comparison (SFT against RL on the same held-out tasks) and the periodic one.

    The held-out tasks are drawn with a fixed seed (0), not the run's, so runs of different
    seeds are scored on the same tasks and their margins compare.
    """

    per_template: int = Field(
        default=10,
        ge=0,
        description="held-out tasks per template for the final comparison, greedy (0: none)",
    )
    pass_k_samples: int = Field(
        default=8, ge=0, description="temperature-1 samples a task for pass@k (0 or 1: off)"
    )
    k_per_template: int = Field(
        default=4, ge=1, description="held-out tasks per template sampled for pass@k"
    )
    batch: int = Field(default=32, ge=1, description="episodes decoded together")
    every: int = Field(
        default=10,
        ge=0,
        description="the evaluation service scores every Nth version during the run, beside "
        "training (0: off)",
    )
    during_per_template: int = Field(
        default=2, ge=1, description="held-out tasks per template of the periodic evaluation"
    )


class RLConfig(CommandConfig, PluginSections):
    """A whole RL run. `model` is a stage-one checkpoint directory (with tokenizer.json).

    Each section is its component's configuration: ``[train]`` the training service's
    (`TrainingConfig`, with ``[train.optim]`` and ``[train.parallel]``), ``[rollout]`` the
    episode runner's and the engine's (`RolloutConfig`), ``[loop]`` the orchestrator's,
    ``[loss]`` the objective's. The run-wide `seed`, `threads` and `sandbox`, the objective
    and the sampling temperature are one knob each, copied into the components that use
    them (`derived`)."""

    model: Path = Field(default=Path("runs/stage1/sft/final"), description="the policy to train")
    run_dir: Path = Field(default=Path("runs/rl"), description="where the run is written")
    seed: int = Field(default=0, description="seed of the task draws, the sampling and the trainer")
    store: str | None = Field(
        default=None, description="weight store URL (none: file://RUN_DIR/weights)"
    )
    sandbox: str | None = Field(default=None, description="sandbox backend (none: bwrap)")
    ray_address: str | None = Field(
        default=None,
        description="join the Ray cluster at this address (none: a local Ray instance; "
        "default $COMPOSER_RAY_ADDRESS)",
    )
    local: bool = Field(default=False, description="services in threads of this process, no Ray")
    threads: int | None = Field(default=1, ge=1, description="torch threads per service")
    loop: OrchestratorConfig = Field(default_factory=OrchestratorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    train: TrainingConfig = Field(default_factory=TrainingConfig)
    loss: RLLossConfig = Field(default_factory=RLLossConfig)
    tasks: TasksSection = Field(default_factory=TasksSection)
    eval: EvalSection = Field(default_factory=EvalSection)

    flag_aliases: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "train.parallel.dp": ("--dp", "--train.dp"),
        "train.parallel.cp": ("--cp", "--train.cp"),
        "train.parallel.ep": ("--ep", "--train.ep"),
        "train.parallel.cp_mode": ("--train.cp-mode",),
    }
    renamed: ClassVar[Mapping[str, str]] = {
        "train.lr": "train.optim.lr",
        "train.weight_decay": "train.optim.weight_decay",
        "train.grad_clip": "train.optim.grad_clip",
        "train.warmup_steps": "train.optim.warmup_steps",
        "train.dp": "train.parallel.dp",
        "train.cp": "train.parallel.cp",
        "train.ep": "train.parallel.ep",
        "train.cp_mode": "train.parallel.cp_mode",
        "rollout.summary_budget": "rollout.summary.context_budget",
        "rollout.summary_tokens": "rollout.summary.summary_tokens",
        "rollout.max_summaries": "rollout.summary.max_summaries",
        "rollout.summary_mode": "rollout.summary.mode",
    }
    derived: ClassVar[Mapping[str, str]] = {
        "train.seed": "the run's `seed`",
        "train.threads": "the run's `threads`",
        "train.rl": "the [loss] section",
        "train.reference": "always on in RL (the KL reference is the starting policy)",
        "train.anchor_eos_id": "the model's tokenizer's end-of-text id",
        "rollout.seed": "the run's `seed`",
        "rollout.backend": "the run's `sandbox`",
        "loss.temperature": "`rollout.temperature` (the loss scores the tokens as sampled)",
    }

    @model_validator(mode="after")
    def _share_run_wide_knobs(self) -> RLConfig:
        """Copy the knobs several components share into each of them (`derived`)."""
        loss = self.loss.model_copy(update={"temperature": self.rollout.temperature})
        train = self.train.model_copy(
            update={"seed": self.seed, "threads": self.threads, "rl": loss, "reference": True}
        )
        rollout = self.rollout.model_copy(update={"seed": self.seed, "backend": self.sandbox})
        self._share(loss=loss, train=train, rollout=rollout)
        return self


def load_config(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> RLConfig:
    """The defaults, then the file's settings, then `overrides` (dotted keys), validated
    together (`composer_rl.config.load`)."""
    return load(RLConfig, path, overrides)


def config_from_args(args: argparse.Namespace) -> RLConfig:
    """`composer-rl rl`'s configuration from its command line."""
    return load_args(RLConfig, args)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and one `--section.field` flag per knob of `RLConfig`."""
    add_flags(parser, RLConfig)


__all__ = [
    "ConfigError",
    "RLConfig",
    "RolloutConfig",
    "add_config_flags",
    "config_from_args",
    "load_config",
    "to_toml",
]
