"""The plugin sections of a run's configuration: ``[plugins]`` and its neighbours."""

from __future__ import annotations

from typing import Any, Literal

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

    strict: bool = Field(default=False, description="a failing plugin stops the run")
    entry_points: bool = Field(default=True, description="load installed `composer` entry points")
    block: list[str] = Field(
        default_factory=list, description="built-ins or entry points to leave out, by name"
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="plugins registered at start, as package.module:Attribute specs",
    )
    hook_budget_s: float | None = Field(
        default=10.0, gt=0, description="seconds one hook call may take; none: no limit"
    )
    over_budget: Literal["skip", "disable"] = Field(
        default="skip",
        description="a plugin past hook_budget_s: skip it for the rest of the step, or "
        "disable it for the rest of the run",
    )


class PluginSections(BaseModel):
    """The plugin sections of a run's configuration, the same in every command that scores
    episodes (`composer-rl rl`, `composer-rl eval`): ``[plugins]``, ``[rewards.<name>]``,
    ``[monitors.<name>]`` and the free-form ``[plugin_config]`` of third-party plugins.
    `plugin_run_config` is what the plugins see in ``composer_configure``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plugins: PluginSettings = Field(
        default_factory=PluginSettings,
        description="which plugins run and how a failing or slow one is treated",
    )
    rewards: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of reward plugins by name (composer_configure's config['rewards'])",
    )
    monitors: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of behaviour monitors by name (config['monitors'])",
    )
    plugin_config: dict[str, Any] = Field(
        default_factory=dict,
        description="free-form settings for third-party plugins, seen at the top level of "
        "their configuration (e.g. {example_reward = {bonus = 0.25}})",
    )

    def plugin_run_config(self) -> dict[str, Any]:
        """What plugins see in `composer_configure`: the plugin sections, and the free-form
        ``[plugin_config]`` table at the top level (a third-party plugin reads its own key)."""
        return {
            **self.plugin_config,
            "plugins": self.plugins.model_dump(),
            "rewards": dict(self.rewards),
            "monitors": dict(self.monitors),
        }
