"""The ``plugins`` section of a run's configuration."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class PluginSettings(BaseModel):
    """How the composition root assembles the plugins of a run.

    ``strict`` makes a failing plugin fatal (see :func:`composer_rewards.score_episode`);
    ``plugins`` are specs (``package.module:Attribute``) registered at start, for example
    the optional chat judge; ``block`` names built-ins or entry points to leave out.

    ``hook_budget_s`` bounds one reward or monitor call (a plugin that sleeps cannot stall
    a step past it); ``over_budget`` says what happens to a plugin past it: ``skip`` it for
    the rest of the step, or ``disable`` it for the rest of the run (kept off across
    restarts until it is added again). See :class:`composer_rewards.PluginScorer`.
    """

    model_config = ConfigDict(extra="forbid")

    strict: bool = False
    entry_points: bool = Field(default=True, description="load installed `composer` entry points")
    block: list[str] = Field(default_factory=list)
    plugins: list[str] = Field(default_factory=list)
    hook_budget_s: float | None = Field(
        default=10.0, gt=0, description="seconds one hook call may take; null for no limit"
    )
    over_budget: Literal["skip", "disable"] = "skip"
