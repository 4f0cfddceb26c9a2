"""The demonstration mix: which behaviour each stage-one demonstration shows, and how often.

Real session logs are not one behaviour. Developers (and models) sometimes check their work
and sometimes do not, sometimes get an edit wrong and recover after a failing run, and
leave the habits our reward plugins exist for: a TODO in the code, a final message that
says nothing about how the work was checked, a file read twice for nothing. A policy
trained on one behaviour (read, edit, "Done.") gives RL nothing to choose between; trained
on a mix, it has a repertoire, and RL, paid only by the hidden tests and the reward
plugins, can select the behaviours that pay on every task (arXiv 2503.01307). Nothing here
pays for running tests as such.

The behaviours (`composer_rl.agent.demonstrations` plays them):

- `careful`: look around, read, edit, run the visible tests, finish saying what was checked;
- `recovering`: read, a plausible wrong first edit, a failing run, the fix, a passing run;
- `careless`: read, an edit (wrong in a `careless_wrong` share), finish without running;
- `todo_left`, `unchecked_message`, `reread`: careful, but with one habit (a TODO comment
  added with the fix, "Done." as the message, a file read twice in a row).

Across all of them, a `lost_read` share of demonstrations (drawn apart from the behaviour)
opens its reading with a file that does not exist: a name recalled from other training
tasks or demonstrations, or the right name's first letters run on into one, the ways the
SFT policies of 2026-12-05 got names wrong (docs/rl/2026-12-05-failed-read-loops.md).
The tool's error comes back, the demonstration lists the files and reads the right one.
Those policies answered such an error by reading the same missing path again until the
turns ran out, in over half of their greedy validation episodes: no demonstration had
ever shown what to do after one.

Each task's behaviour is drawn from its id and `seed` alone (`behaviour_of`), so a task's
demonstration does not depend on which other tasks are in the run, and the same config
gives the same demonstrations on every machine.

The default shares are a reasoned first guess, not a measured optimum: mostly careful (the
behaviour that should win), enough recovering and careless episodes that the SFT policy's
choice at the point where it could run the tests is a real one, and a little of each
habit. They are to be tuned on validation tasks (carved from the training split,
`composer_rl.tasks.templates.base.is_validation`), never on the held-out split.
"""

from __future__ import annotations

import hashlib
import math
import random
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Behaviour(StrEnum):
    CAREFUL = "careful"
    RECOVERING = "recovering"
    CARELESS = "careless"
    TODO_LEFT = "todo_left"
    UNCHECKED_MESSAGE = "unchecked_message"
    REREAD = "reread"


HABITS: tuple[Behaviour, ...] = (
    Behaviour.TODO_LEFT,
    Behaviour.UNCHECKED_MESSAGE,
    Behaviour.REREAD,
)
"""Careful demonstrations with one habit a reward plugin or monitor exists for."""


def unit_draw(*key: object) -> float:
    """A number in [0, 1) from a hash of `key`: stable on every machine and Python version
    (unlike `hash()`), and independent for different keys."""
    digest = hashlib.sha256(":".join(str(k) for k in key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class DemonstrationMix(BaseModel):
    """Shares of the behaviours among stage one's demonstrations, and the seed that deals
    them out. Shares must be non-negative; they are normalised by their sum (so they need
    not sum to 1: `careful=2, careless=1` is two thirds careful)."""

    model_config = ConfigDict(extra="forbid")

    careful: float = 0.4
    recovering: float = 0.2
    careless: float = 0.25
    todo_left: float = 0.05
    unchecked_message: float = 0.05
    reread: float = 0.05
    careless_wrong: float = Field(
        default=0.3,
        description="share of careless demonstrations whose edit is wrong (a mistake that "
        "fails the visible tests, where the repository has them)",
    )
    lost_read: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of demonstrations (of any behaviour) whose first read names a "
        "file that does not exist, then lists the files and reads the right one (0: none; "
        "off until a share is chosen on validation tasks)",
    )
    max_wrong_probes: int = Field(
        default=6,
        ge=1,
        description="wrong first edits tried per task (each costs one visible-test run in a "
        "scratch sandbox) before a recovering demonstration falls back to careful",
    )
    seed: int = 0

    @model_validator(mode="after")
    def _valid_shares(self) -> DemonstrationMix:
        for behaviour in Behaviour:
            value = getattr(self, behaviour.value)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"demonstrations.{behaviour.value} = {value}: a share must be a finite "
                    "number >= 0"
                )
        if sum(getattr(self, b.value) for b in Behaviour) <= 0:
            raise ValueError(
                "demonstrations: every share is 0; give at least one behaviour a positive "
                f"share ({', '.join(b.value for b in Behaviour)})"
            )
        if not 0 <= self.careless_wrong <= 1:
            raise ValueError(
                f"demonstrations.careless_wrong = {self.careless_wrong}: must be in [0, 1]"
            )
        return self

    @classmethod
    def only(cls, behaviour: Behaviour | str, **settings: object) -> DemonstrationMix:
        """Every demonstration of one behaviour (e.g. the careful-only SFT reference)."""
        shares: dict[str, object] = {b.value: 0.0 for b in Behaviour}
        shares[Behaviour(behaviour).value] = 1.0
        return cls.model_validate({**shares, **settings})

    def shares(self) -> dict[Behaviour, float]:
        """Each behaviour's share, normalised to sum to 1."""
        raw = {b: float(getattr(self, b.value)) for b in Behaviour}
        total = sum(raw.values())
        return {b: v / total for b, v in raw.items()}

    def behaviour_of(self, task_id: str) -> Behaviour:
        """The behaviour of `task_id`'s demonstration: the shares as consecutive intervals
        of [0, 1), hit by a draw from (seed, task id)."""
        draw = unit_draw("behaviour", self.seed, task_id)
        edge = 0.0
        chosen = Behaviour.CAREFUL
        for behaviour, share in self.shares().items():
            if share <= 0:
                continue
            chosen = behaviour
            edge += share
            if draw < edge:
                return behaviour
        return chosen  # rounding left the draw just past the last edge

    def careless_is_wrong(self, task_id: str) -> bool:
        return unit_draw("careless_wrong", self.seed, task_id) < self.careless_wrong

    def read_is_lost(self, task_id: str) -> bool:
        """Whether `task_id`'s demonstration opens its reading with a missing file."""
        return unit_draw("lost_read", self.seed, task_id) < self.lost_read

    def rng(self, task_id: str, purpose: str) -> random.Random:
        """A generator for one task's other choices (which mistake, which note), seeded by
        (seed, task id, purpose) so that one choice does not shift another."""
        return random.Random(f"{purpose}:{self.seed}:{task_id}")
