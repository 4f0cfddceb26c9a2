"""What a study is, what it returns, and the options every study reads.

A study reruns one claim of the Composer 2 report at tiny scale. It returns its table, a
figure and a verdict; `composer_rl.studies.runner` writes them into the run directory, so
every study's files look the same and a reader knows where to find the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from matplotlib.figure import Figure

NOT_IMPLEMENTED = "not implemented yet: needs the RL loop's measured defaults"

RANDOM_POLICY_NOTE = (
    "Random-weight policy (no --checkpoint): the pipeline is real, the behaviour is not "
    "meaningful; pass the stage-one SFT checkpoint for the full study."
)
"""The note of a study that trains or evaluates a policy and was given none."""


WatchedBehaviour = Literal["reread", "todo_left", "failed_read_again"]
"""behaviour-reward: the behaviours it can watch, each with its monitor and matching reward
(`composer_rl.studies.behaviour_reward.WATCHES`)."""


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
    # Studies that train: where their runs go (kept); self-summary: its episodes; None: a
    # temporary directory
    work_dir: Path | None = None
    # behaviour-reward: the behaviour its monitor flags and its added reward charges
    behaviour: WatchedBehaviour = "reread"

    def __post_init__(self) -> None:
        choices = get_args(WatchedBehaviour)
        if self.behaviour not in choices:
            raise ValueError(
                f"behaviour {self.behaviour!r} is not one of {', '.join(map(repr, choices))}"
            )


VerdictLabel = Literal["held", "held in part", "did not hold", "undecided"]
"""The only words a study's verdict may use (result.json's ``verdict``, table.md, the READMEs).

- *held*: the claim as stated held here;
- *held in part*: one part held and another did not; the verdict's `detail` says which;
- *did not hold*: measured, and the claim was not borne out;
- *undecided*: the study cannot decide; `detail` says what the decision rests on (what
  would have to be shown first).
"""

VERDICT_LABELS: tuple[VerdictLabel, ...] = get_args(VerdictLabel)
NEEDS_DETAIL: frozenset[VerdictLabel] = frozenset({"held in part", "undecided"})
"""The labels that mean nothing without saying which part, or what they rest on."""


@dataclass(frozen=True)
class Verdict:
    """Whether the claim held here, in one of the four `VerdictLabel` words, how strongly,
    and in words a reader can check against the table.

    `detail` is required for *held in part* (which part held, which did not) and for
    *undecided* (what the decision rests on); a label outside the vocabulary, or one of those
    two without its detail, is rejected when the verdict is made, so no study can write one.
    """

    label: VerdictLabel
    strength: str
    summary: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.label not in VERDICT_LABELS:
            raise ValueError(
                f"verdict {self.label!r} is not one of {', '.join(map(repr, VERDICT_LABELS))}"
            )
        if self.label in NEEDS_DETAIL and not self.detail.strip():
            what = "which part held" if self.label == "held in part" else "what it rests on"
            raise ValueError(f"a verdict of {self.label!r} must say {what} (detail)")

    @property
    def held(self) -> bool | None:
        """True only for *held*; None for *undecided*; False otherwise (*held in part*
        included: the claim as stated was not shown)."""
        return {"held": True, "undecided": None}.get(self.label, False)

    @property
    def text(self) -> str:
        """The label with its detail ('held in part: ...'), as the READMEs' tables write it."""
        return f"{self.label}: {self.detail}" if self.detail else self.label


def check_verdict(label: str, detail: str = "") -> Verdict:
    """The verdict a committed result.json (or a README) states, validated like a new one;
    ValueError for a label outside the vocabulary."""
    return Verdict(label, "", "", detail)  # type: ignore[arg-type]


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
