"""The common runner: run one study, write its files, print its table and verdict.

Every study's run directory holds the same three files:

- ``table.md``: the claim, the table, the verdict and the wall-clock with the command;
- ``plot.png``: the study's figure;
- ``result.json``: verdict (one of `base.VERDICT_LABELS`, its detail, strength, summary), wall-clock seconds, the command, the
  machine's core count, and the numbers behind the verdict.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from composer_rl.studies.base import Study, StudyOptions, StudyOutcome, markdown_table


class StudyNotImplemented(RuntimeError):
    """The study is listed (its claim is known) but has no code yet."""


@dataclass(frozen=True)
class StudyRun:
    """Where a finished study wrote its files, and what it found."""

    run_dir: Path
    outcome: StudyOutcome
    wall_clock_s: float
    result: dict[str, Any]

    @property
    def table_path(self) -> Path:
        return self.run_dir / "table.md"

    @property
    def plot_path(self) -> Path:
        return self.run_dir / "plot.png"

    @property
    def result_path(self) -> Path:
        return self.run_dir / "result.json"


def render_markdown(study: Study, outcome: StudyOutcome, wall: float, command: str) -> str:
    verdict = outcome.verdict
    parts = [
        f"# Study: {study.name}",
        "",
        f"**Claim** ({study.source}): {study.claim}",
        "",
        markdown_table(outcome.columns, outcome.rows),
        "",
    ]
    for heading, columns, rows in outcome.more_tables:
        parts += [f"**{heading}**", "", markdown_table(columns, rows), ""]
    parts += [
        f"**Verdict: {verdict.label}**"
        + (f": {verdict.detail}" if verdict.detail else "")
        + f" ({verdict.strength}). {verdict.summary}",
    ]
    if outcome.notes:
        parts += ["", *(f"- {note}" for note in outcome.notes)]
    parts += [
        "",
        f"Wall-clock: {wall:.1f} s on {os.cpu_count()} CPU cores ({platform.machine()}); "
        f"command: `{command}`",
        "",
    ]
    return "\n".join(parts)


def run_study(
    study: Study, options: StudyOptions, run_dir: Path, command: str | None = None
) -> StudyRun:
    """Run `study`, write table.md, plot.png and result.json into `run_dir`, return them.

    Raises StudyNotImplemented for a listed study without code (nothing is written)."""
    if study.run is None:
        raise StudyNotImplemented(f"study {study.name!r}: {study.missing}")
    if command is None:
        command = "composer-rl study " + study.name + (" --quick" if options.quick else "")
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    outcome = study.run(options)
    wall = time.perf_counter() - start
    outcome.figure.savefig(run_dir / "plot.png", dpi=110)
    plt.close(outcome.figure)
    (run_dir / "table.md").write_text(render_markdown(study, outcome, wall, command))
    result: dict[str, Any] = {
        "study": study.name,
        "claim": study.claim,
        "source": study.source,
        "quick": options.quick,
        "seed": options.seed,
        "held": outcome.verdict.held,
        "verdict": outcome.verdict.label,
        "verdict_detail": outcome.verdict.detail,
        "strength": outcome.verdict.strength,
        "summary": outcome.verdict.summary,
        "wall_clock_s": round(wall, 3),
        "cpu_cores": os.cpu_count(),
        "command": command,
        "numbers": outcome.numbers,
        "notes": outcome.notes,
    }
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=_jsonable) + "\n")
    return StudyRun(run_dir, outcome, wall, result)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def command_line(argv: list[str]) -> str:
    """The command as a reader would retype it."""
    return shlex.join(["composer-rl", *argv])
