"""An example reward plugin for Composer, packaged the way a third party would ship one.

It gives a small bonus to episodes whose change touches a test file, read from the run
config's ``example_reward`` section (``{"example_reward": {"bonus": 0.25}}``), and
reports as a monitor how many test files were touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_rewards import Episode, MonitorReport, RewardComponent, hookimpl

__version__ = "0.1.0"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bonus: float = Field(default=0.1, ge=0)


def is_test_file(path: str) -> bool:
    name = PurePosixPath(path).name
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or "tests" in PurePosixPath(path).parts
    )


class TestsTouchedReward:
    """``tests_touched`` = 1 when the change touches a test file, weighted by ``bonus``."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.settings = Settings()

    @hookimpl
    def composer_configure(self, config: Mapping[str, Any]) -> None:
        self.settings = Settings.model_validate(config.get("example_reward") or {})

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        touched = [p for p in episode.changed_files if is_test_file(p)]
        return RewardComponent(
            name="tests_touched",
            value=1.0 if touched else 0.0,
            weight=self.settings.bonus,
            details=", ".join(touched),
        )

    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        touched = sum(1 for p in episode.changed_files if is_test_file(p))
        return MonitorReport(metrics={"test_files_touched": touched})
