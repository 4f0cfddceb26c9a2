"""The RL run's configuration: typed, validated, loadable from TOML, one flag per knob.

Every knob lives in one pydantic model (`RLConfig`) with sections; a TOML file gives any
subset of them and flags override the file (`--section.field value`). An unknown key or a
bad value is an error that names the key and what it accepts, never a silent default.
"""

from __future__ import annotations

import argparse
import json
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from composer_rl.errors import ConfigError, explain_validation, section_type
from composer_rl.plugins.settings import PluginSettings
from composer_rl.rl.loss import RLLossConfig
from composer_rl.rl.orchestrator import OrchestratorConfig
from composer_rl.tasks.model import Category


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RolloutSection(_Section):
    max_turns: int = Field(
        default=10,
        ge=1,
        description="a recovering episode takes 7 calls: look, read, edit, run, fix, run, finish",
    )
    max_new_tokens: int = Field(default=160, ge=8)
    temperature: float = Field(default=1.0, gt=0)
    max_batch_size: int = Field(default=24, ge=1, description="episodes decoded together")
    max_seq_len: int = Field(default=2048, ge=64, description="as stage one's SFT rows")
    grading_workers: int = Field(default=2, ge=1)
    record_routing: bool = Field(default=True, description="needed for router replay")
    compile_decode: bool = Field(
        default=False,
        description="capture the engine's decode step with torch.compile (same results; "
        "pays at small decode batches, falls back to eager if capture fails)",
    )
    summary_budget: int | None = Field(
        default=768,
        ge=64,
        description="self-summarize when the next turn could pass this many context tokens "
        "(None: no summaries; the episode ends at max_seq_len)",
    )
    summary_tokens: int = Field(default=96, ge=8, description="room the summary gets")
    max_summaries: int = Field(default=3, ge=1, description="compactions an episode may make")
    summary_mode: Literal["summarize", "truncate"] = Field(  # agent.summarize.CompactionMode
        default="summarize",
        description="how a full context is condensed: the model's summary, or 'truncate' "
        "(drop the oldest turns; the self-summary study's baseline)",
    )


class TrainSection(_Section):
    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float | None = Field(default=1.0, gt=0)
    warmup_steps: int = Field(default=0, ge=0, description="then a constant learning rate")
    checkpoint_every: int = Field(
        default=1,
        ge=1,
        description="steps between trainer checkpoints: a kill loses the steps since the last "
        "one (their groups are trained again); the tiny preset's is 32 MiB in 0.1-0.3 s, "
        "under a hundredth of a step (benchmarks/kill_cost.py)",
    )
    dp: int = Field(
        default=1, ge=1, description="data-parallel training ranks (Ray actors; alias --dp)"
    )
    cp: int = Field(
        default=1,
        ge=1,
        description="context-parallel ranks a sequence is split over (dp x cp actors; --cp)",
    )
    ep: int = Field(
        default=1, ge=1, description="expert-parallel degree, dividing dp x cp (alias --ep)"
    )
    cp_mode: Literal["allgather", "ring"] = "allgather"
    publish_dtype: Literal["float32", "bfloat16"] | None = Field(
        default=None,
        description="precision of the weights the engines receive (None: the trainer's, "
        "float32). 'bfloat16' halves the sync's bytes, and the engines then decode with "
        "bf16-rounded weights while the trainer keeps float32: a train/inference mismatch "
        "of the kind router replay corrects (the router-replay study's learning runs)",
    )
    anchor_data: Path | None = Field(
        default=None,
        description="sft_tokens.pt for loss.anchor_weight > 0 (default: the one of the "
        "stage-one run the model comes from, MODEL/../../sft_tokens.pt)",
    )

    @property
    def ranks(self) -> int:
        """Training processes: dp x cp (one Ray actor each when above 1)."""
        return self.dp * self.cp


FLAG_ALIASES: dict[str, tuple[str, ...]] = {
    "train.dp": ("--dp",),
    "train.cp": ("--cp",),
    "train.ep": ("--ep",),
}
"""Short flags for knobs also spelled that way by `composer-rl pretrain`."""


class TasksSection(_Section):
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


class RLConfig(_Section):
    """A whole RL run. `model` is a stage-one checkpoint directory (with tokenizer.json)."""

    model: Path = Path("runs/stage1/sft/final")
    run_dir: Path = Path("runs/rl")
    seed: int = 0
    store: str | None = Field(
        default=None, description="weight store URL (default file://run_dir/weights)"
    )
    sandbox: str | None = Field(default=None, description="sandbox backend (default bwrap)")
    ray_address: str | None = Field(default=None, description="join a Ray cluster (default: local)")
    local: bool = Field(default=False, description="services in threads of this process, no Ray")
    threads: int | None = Field(default=1, ge=1, description="torch threads per service")
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    rewards: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of reward plugins by name (composer_configure's config['rewards'])",
    )
    plugin_config: dict[str, Any] = Field(
        default_factory=dict,
        description="free-form settings for third-party plugins, seen at the top level of "
        "their configuration (e.g. {example_reward = {bonus = 0.25}})",
    )
    monitors: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of behaviour monitors by name (config['monitors'])",
    )
    loop: OrchestratorConfig = Field(default_factory=OrchestratorConfig)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    train: TrainSection = Field(default_factory=TrainSection)
    loss: RLLossConfig = Field(default_factory=RLLossConfig)
    tasks: TasksSection = Field(default_factory=TasksSection)
    eval: EvalSection = Field(default_factory=EvalSection)


def _leaf_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        sub = section_type(info.annotation)
        if sub is not None:
            out += _leaf_fields(sub, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", info))
    return out


def _choices(annotation: Any) -> list[str] | None:
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return [str(a) for a in args]
    if origin in (typing.Union, types.UnionType):
        for a in args:
            found = _choices(a)
            if found:
                return found
    return None


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and one `--section.field` flag per knob (values parsed by pydantic)."""
    parser.add_argument("--config", type=Path, help="TOML file with any of the settings below")
    for key, info in _leaf_fields(RLConfig):
        choices = _choices(info.annotation)
        help_text = (
            info.description or ""
        ) + f" (default: {info.get_default(call_default_factory=True)!r})"
        if choices:
            help_text += f"; one of {', '.join(choices)}"
        flag = "--" + key.replace("_", "-")
        aliases = FLAG_ALIASES.get(key, ())
        parser.add_argument(flag, *aliases, dest=f"cfg::{key}", metavar="V", help=help_text)


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = value


def _parse_flag(raw: str) -> Any:
    text = raw.strip()
    if text.lower() in ("none", "null"):
        return None
    if text.startswith(("[", "{")):  # lists and tables as JSON: --plugins.block '["style"]'
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"flag value {raw!r} is not valid JSON: {error}") from None
    return raw


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> RLConfig:
    """The file's settings, then `overrides` (dotted keys), validated together."""
    data: dict[str, Any] = {}
    origin = "defaults"
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path} is not valid TOML: {error}") from None
        origin = str(path)
    for key, value in (overrides or {}).items():
        _set(data, key, value)
        origin = f"{origin} + flags" if path else "flags"
    try:
        return RLConfig.model_validate(data)
    except ValidationError as error:
        raise explain_validation(error, origin, RLConfig) from None


def config_from_args(args: argparse.Namespace) -> RLConfig:
    overrides = {
        key.removeprefix("cfg::"): _parse_flag(value)
        for key, value in vars(args).items()
        if key.startswith("cfg::") and value is not None
    }
    return load_config(getattr(args, "config", None), overrides)


def to_toml(config: RLConfig) -> str:
    """The resolved configuration as TOML (written into the run directory).

    `load_config` reads it back to the same configuration, except a setting that is None
    where its default is not (TOML has no null): it is left out and reads as the default.
    """

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):  # an inline table; TOML has no null, so None entries are left out
            items = (f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items() if x is not None)
            return "{" + ", ".join(items) + "}"
        return json.dumps(str(v))  # a TOML basic string uses JSON's escapes

    top: list[str] = []
    sections: list[str] = []
    for name, field_value in config.model_dump(mode="json").items():
        if isinstance(field_value, dict):
            body = [f"{k} = {value(v)}" for k, v in field_value.items() if v is not None]
            sections.append(f"\n[{name}]\n" + "\n".join(body))
        elif field_value is not None:
            top.append(f"{name} = {value(field_value)}")
    return "\n".join(top) + "\n" + "\n".join(sections) + "\n"


__all__ = [
    "ConfigError",
    "RLConfig",
    "add_config_flags",
    "config_from_args",
    "load_config",
    "to_toml",
]
