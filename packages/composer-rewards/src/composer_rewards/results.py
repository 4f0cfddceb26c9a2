"""What reward and monitor hooks return.

A reward plugin returns named, weighted components rather than one number so that each
signal is logged on its own and its weight can be tuned without touching the plugin.
A behaviour monitor returns metrics (numbers to plot) and flags (named findings with the
evidence that raised them); monitors never change the reward.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RewardComponent(BaseModel):
    """One named reward signal. The episode's reward is the sum of ``weight * value``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    value: float
    weight: float = 1.0
    details: str = ""

    @property
    def weighted(self) -> float:
        return self.weight * self.value

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value) and math.isfinite(self.weight)


class MonitorReport(BaseModel):
    """Metrics and flags of one behaviour monitor for one episode.

    `flags` maps a flag name to the evidence for it (a short human-readable string), so a
    flagged episode can be inspected without rerunning the monitor.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: Mapping[str, float] = Field(default_factory=dict)
    flags: Mapping[str, str] = Field(default_factory=dict)

    @field_validator("metrics", mode="before")
    @classmethod
    def _bools_are_numbers(cls, value: object) -> object:
        if isinstance(value, Mapping):
            return {k: float(v) if isinstance(v, bool) else v for k, v in value.items()}
        return value

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in self.metrics.values())
