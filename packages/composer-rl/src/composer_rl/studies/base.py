"""What a study is, what it returns, and the options every study reads.

A study reruns one claim of the Composer 2 report at tiny scale. It returns its table, a
figure and a verdict; `composer_rl.studies.runner` writes them into the run directory, so
every study's files look the same and a reader knows where to find the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

NOT_IMPLEMENTED = "not implemented yet: needs the RL loop's measured defaults"

RANDOM_POLICY_NOTE = (
    "Random-weight policy (no --checkpoint): the pipeline is real, the behaviour is not "
    "meaningful; pass the stage-one SFT checkpoint for the full study."
)
"""The note of a study that trains or evaluates a policy and was given none."""


@dataclass(frozen=True)
class StudyOptions:
    """Options from the command line. `quick` shrinks every size so the study runs in
    under three minutes on two cores (what the tests run); the full variant is what
    docs/studies/ shows."""

    quick: bool = False
    seed: int = 0
    rl_run_dir: Path | None = None  # kl-estimators: an RL run whose metrics.jsonl to plot
    # nvfp4-invariance, router-replay, async: a trained model instead of random init
    checkpoint: Path | None = None
    # Studies that train: where their runs go (kept); None: a temporary directory
    work_dir: Path | None = None


@dataclass(frozen=True)
class Verdict:
    """Whether the claim held here, and how strongly, in words a reader can check
    against the table. `held` is None when the study could not decide."""

    held: bool | None
    strength: str
    summary: str

    @property
    def label(self) -> str:
        return {True: "held", False: "did not hold", None: "undecided"}[self.held]


@dataclass
class StudyOutcome:
    """A study's result before it is written: the table (header + rows of strings), the
    figure, the verdict, and the numbers behind the verdict (they go to result.json)."""

    columns: list[str]
    rows: list[list[str]]
    figure: Figure
    verdict: Verdict
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Further tables after the main one: (heading, columns, rows) each
    more_tables: list[tuple[str, list[str], list[list[str]]]] = field(default_factory=list)


StudyFunction = Callable[[StudyOptions], StudyOutcome]


@dataclass(frozen=True)
class Study:
    """One claim of the report. `run` is None for a study not written yet: the command
    then says so and exits non-zero rather than print a made-up result."""

    name: str
    claim: str
    source: str  # where the claim is in the report
    run: StudyFunction | None = None
    missing: str = NOT_IMPLEMENTED

    @property
    def implemented(self) -> bool:
        return self.run is not None


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table; `|` inside a cell is escaped."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(columns), line(["---"] * len(columns)), *(line(r) for r in rows)])
