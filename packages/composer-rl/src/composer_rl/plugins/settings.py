"""The ``plugins`` section of a run's configuration."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PluginSettings(BaseModel):
    """How the composition root assembles the plugins of a run.

    ``strict`` makes a failing plugin fatal (see :func:`composer_rewards.score_episode`);
    ``plugins`` are specs (``package.module:Attribute``) registered at start, for example
    the optional chat judge; ``block`` names built-ins or entry points to leave out.
    """

    model_config = ConfigDict(extra="forbid")

    strict: bool = False
    entry_points: bool = Field(default=True, description="load installed `composer` entry points")
    block: list[str] = Field(default_factory=list)
    plugins: list[str] = Field(default_factory=list)
