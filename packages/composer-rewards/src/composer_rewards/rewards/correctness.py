"""Correctness: did the task's tests pass on the final workspace."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from composer_hooks import hookimpl
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent


class CorrectnessSettings(BaseModel):
    """``all_pass`` gives 1 only when every test passed; ``fraction`` gives passed / total.

    An episode whose tests did not run at all (the test command crashed, or the agent broke
    collection) scores 0 in both modes.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["all_pass", "fraction"] = "all_pass"
    weight: float = 1.0


class CorrectnessReward(ConfiguredPlugin[CorrectnessSettings]):
    name = "correctness"
    settings_type = CorrectnessSettings

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        results = episode.test_results
        if not results.ran:
            value = 0.0
        elif self.settings.mode == "all_pass":
            value = 1.0 if results.all_passed else 0.0
        else:
            value = results.passed / results.total
        return RewardComponent(
            name="correctness",
            value=value,
            weight=self.settings.weight,
            details=f"{results.passed} passed, {results.failed} failed, {results.errors} errors",
        )
