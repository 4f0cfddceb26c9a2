"""Self-summarization: when an episode nears its context budget, the model condenses it.

As in the report: generation runs until a token-length trigger; a short synthetic request
("summarize the conversation") is appended; the model writes a summary in the room it is
given; the episode then continues from a condensed context holding the task, the summary and
the number of summaries so far. It can repeat. Every segment of the chain is trained with
the episode's final reward, so summaries that carried what was needed are reinforced and
ones that lost it are penalised.

The baseline it is measured against (`mode="truncate"`) condenses at the same trigger by
dropping the oldest whole turns and keeping the task and the most recent turns that fit.

This module is the text and the trigger; `EpisodeRunner` applies them, and
`composer_rl.agent.oracle.summary_demonstration` writes the SFT examples that teach the
tiny model to summarize at all.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_rl.agent.format import ASSISTANT, END_OF_TURN, USER, render_prompt

CompactionMode = Literal["summarize", "truncate"]
"""How a full context is condensed: the model's own summary (the report's method), or plain
truncation (the oldest turns dropped, the task kept): the baseline of `composer-rl study
self-summary`."""

SUMMARY_REQUEST = (
    f"{END_OF_TURN}{USER}Context is full. Summarize the conversation: what you read, "
    f"what you changed, and what remains to do.{END_OF_TURN}{ASSISTANT}"
)
"""Appended (as context, not as the model's tokens) when the trigger fires."""


class SummaryConfig(BaseModel):
    """When to condense an episode's context, how, and how much room a summary gets (tokens).

    The defaults are the RL rollouts' (`composer-rl rl`'s ``[rollout.summary]``), the only
    place a context is condensed unless asked: evaluation's runner has no summaries
    (`RunnerConfig.summary` None). `max_summaries` bounds the compactions of one episode
    in either mode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_budget: int | None = Field(
        default=1536,
        description="condense when the next turn could pass this many context tokens "
        "(three quarters of the rollouts' 2,048-token context, as 768 was of the 1,024 it "
        "was set for; none: never; the episode ends when its context is full)",
    )
    summary_tokens: int = Field(default=96, ge=8, description="room the summary gets")
    max_summaries: int = Field(default=3, ge=1, description="compactions an episode may make")
    mode: CompactionMode = Field(
        default="summarize",
        description="how a full context is condensed: the model's summary, or 'truncate' "
        "(drop the oldest turns; the self-summary study's baseline)",
    )

    @model_validator(mode="after")
    def _room_for_the_summary(self) -> SummaryConfig:
        if self.context_budget is not None and self.context_budget <= self.summary_tokens:
            raise ValueError(
                "summary: need context_budget > summary_tokens (>= 8); got "
                f"{self.context_budget} and {self.summary_tokens}"
            )
        return self


def should_summarize(
    context_tokens: int, next_turn_tokens: int, done: int, config: SummaryConfig | None
) -> bool:
    """The trigger: the next turn could cross the budget and compactions are left."""
    if config is None or config.context_budget is None or done >= config.max_summaries:
        return False
    return context_tokens + next_turn_tokens > config.context_budget


def truncation_start(turn_starts: list[int], length: int, room: int) -> int:
    """Where plain truncation's kept tail begins in a context of `length` tokens: the
    earliest turn start whose tail fits in `room` tokens, or `length` (keep nothing) when
    not even the last turn fits. Whole turns only: a tool call cut in half would teach the
    model nothing and read as a malformed call."""
    return next((s for s in sorted(turn_starts) if length - s <= room), length)


def summary_text(generated: str) -> str:
    """The summary the model wrote, without its end-of-turn marker."""
    return generated.split(END_OF_TURN, 1)[0].strip()


def condensed_prompt(instruction: str, summary: str, count: int) -> str:
    """The context an episode continues from after its `count`-th summary."""
    return render_prompt(f"{instruction}\n\n[summary {count} of the work so far]\n{summary}")


__all__ = [
    "SUMMARY_REQUEST",
    "CompactionMode",
    "SummaryConfig",
    "condensed_prompt",
    "should_summarize",
    "summary_text",
    "truncation_start",
]
