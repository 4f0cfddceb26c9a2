"""The RL runs a study trains: one `run_rl` per variant, reused when a finished one is there.

A study that trains several variants (length-penalty, cpt-vs-rl) can be killed in its third
run; with `--work-dir` the rerun analyses the finished runs whose `config.toml` matches
instead of repeating them, and trains only what is missing.
"""

from __future__ import annotations

import hashlib
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer_rl.config import ConfigError, load_tables
from composer_rl.progress import StepProgress
from composer_rl.rl.config import RLConfig, load_config, to_toml
from composer_rl.rl.lineage import final_lineage
from composer_rl.rl.run import run_rl
from composer_rl.stages.metrics import read_metrics


@dataclass(frozen=True)
class RLSizes:
    steps: int
    group_size: int
    groups_per_step: int
    lr: float | None  # None: the RL config's default


def study_settings(
    model: Path, run_dir: Path, sizes: RLSizes, overrides: dict[str, object], seed: int
) -> dict[str, object]:
    """The RL settings of a study run: `overrides`, then the run's place and sizes.

    Every study run leaves hard-task upsampling and the evaluations off: upsampling reads
    the episodes' lengths, so it would give each variant other tasks, and the studies
    compare the episodes themselves."""
    settings: dict[str, object] = {
        **overrides,
        "model": str(model),
        "run_dir": str(run_dir),
        "seed": seed,
        "local": True,
        "loop.steps": sizes.steps,
        "loop.group_size": sizes.group_size,
        "loop.groups_per_step": sizes.groups_per_step,
        "loop.upsample_hard_after": None,
        "eval.per_template": 0,
        "eval.every": 0,
    }
    if sizes.lr is not None:
        settings["train.optim.lr"] = sizes.lr
    return settings


def run_rl_reporting(
    config: RLConfig, step_boundary: Callable[[int], None] | None = None
) -> list[dict[str, Any]]:
    """`run_rl` with a progress line per step under the run directory's name (a bar on a
    terminal): a study trains several runs of minutes each, and `composer-rl study ... >
    log` printed nothing until its table."""
    with StepProgress(config.run_dir.name, config.loop.steps) as progress:

        def on_step(row: dict[str, Any]) -> None:
            reward = row.get("reward_mean")
            progress.update(int(row["step"]), info="" if reward is None else f"reward {reward:.3f}")

        return run_rl(config, on_step=on_step, step_boundary=step_boundary)


def run_or_reuse(
    model: Path, run_dir: Path, sizes: RLSizes, overrides: dict[str, object], seed: int
) -> tuple[list[dict[str, Any]], bool]:
    """A variant's per-step metrics, and whether a finished run in `run_dir` was reused."""
    config = load_config(None, study_settings(model, run_dir, sizes, overrides, seed))
    finished = finished_history(run_dir, config)
    if finished is not None:
        return finished, True
    shutil.rmtree(run_dir, ignore_errors=True)
    digest = weights_digest(model)
    history = run_rl_reporting(config)
    if digest is not None:
        (run_dir / WEIGHTS_RECORD).write_text(digest + "\n")
    return history, False


WEIGHTS_RECORD = "checkpoint.sha256"
"""The SHA-256 of the weights a study's RL run started from, beside its `config.toml`."""


def weights_digest(model: Path) -> str | None:
    """SHA-256 of a checkpoint's `model.safetensors` (None if it has none)."""
    weights = model / "model.safetensors"
    if not weights.is_file():
        return None
    with weights.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def finished_history(run_dir: Path, config: RLConfig) -> list[dict[str, Any]] | None:
    """The metrics of a run in `run_dir` that finished under exactly `config` (every step,
    or the epoch ran out first), from the checkpoint as it is now.

    The config names the checkpoint by path only, and a study can rewrite the checkpoint at
    that path (cpt-vs-rl's stage one with more SFT steps): a run whose recorded weights
    differ from the checkpoint's trained another policy and is not reused. A run without the
    record (older than it) is not reused if the weights were written after it."""
    metrics, written = run_dir / "metrics.jsonl", run_dir / "config.toml"
    if not (metrics.is_file() and written.is_file()):
        return None
    record, weights = run_dir / WEIGHTS_RECORD, Path(config.model) / "model.safetensors"
    if record.is_file():
        if record.read_text().strip() != weights_digest(Path(config.model)):
            return None
    elif weights.is_file() and weights.stat().st_mtime > written.stat().st_mtime:
        return None
    # What the file records must agree with what `config` would record, both read as the
    # current configuration reads them (so a file written before a key was renamed still
    # matches) and written back the same way (to_toml leaves out None settings).
    try:
        recorded = as_recorded(tomllib.loads(written.read_text()))
    except (ConfigError, tomllib.TOMLDecodeError):
        return None
    if recorded != as_recorded(tomllib.loads(to_toml(config))):
        return None
    # The steps the final policy descends from: a kill between checkpoints logs the lost
    # steps twice, with a restart record between (`composer_rl.rl.lineage`).
    rows = final_lineage(read_metrics(run_dir))
    # A run whose epoch ran out before its last step (constant groups dropped from a small
    # task file) ended too: `run_rl` exports final/ only when it returns.
    ended = (run_dir / "final" / "tokenizer.json").is_file()
    return rows if len(rows) >= config.loop.steps or ended else None


def as_recorded(tables: dict[str, Any]) -> dict[str, Any]:
    """An RL run's recorded `config.toml` tables as this version reads and writes them."""
    return tomllib.loads(to_toml(load_tables(RLConfig, [("config.toml", tables)])))


def late_episodes(episodes: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """Episodes sampled entirely in the second half of a run of `steps` steps: in a
    single-epoch run, the trained policy's first attempts at tasks it has not seen."""
    return [e for e in episodes if min(e["versions"]) >= steps // 2]
