"""The length penalty of the Composer 2 report.

    C(x) = ((1 + k x)^(1 - q) - 1) / (k (1 - q)),   C(x) = ln(1 + k x) / k  at q = 1,

and C(x) = x in the limit k -> 0. For k > 0 and q > 0 it is increasing and concave: the
first tokens of an episode cost the most, so easy tasks learn to finish fast while hard
ones are not crushed by a linear cost. x is a weighted sum of what the episode spent:
thinking, tool-call, tool-output and final-message tokens, tool calls and turns.

It is computed as ``expm1((1 - q) log1p(k x)) / (k (1 - q))``, which is exact at the
limits and keeps full precision near q = 1 and for small k x.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from composer_hooks import hookimpl
from composer_rewards.episode import Episode
from composer_rewards.plugin import ConfiguredPlugin
from composer_rewards.results import RewardComponent


def length_cost(x: float, k: float, q: float) -> float:
    """C(x) for x >= 0, k >= 0, q >= 0 (see the module docstring)."""
    if x < 0 or k < 0 or q < 0:
        raise ValueError(f"length_cost needs x, k, q >= 0, got x={x}, k={k}, q={q}")
    if k == 0.0:
        return x
    log_term = math.log1p(k * x)
    if q == 1.0:
        return log_term / k
    return math.expm1((1.0 - q) * log_term) / (k * (1.0 - q))


def length_x_from_cost(cost: float, k: float, q: float) -> float:
    """The x whose cost is `cost`: the inverse of `length_cost` (which is strictly increasing).

    Logs keep the weighted component, not x; this recovers x from it, e.g. to give a linear
    penalty the strength of the concave one at a measured episode length.
    """
    if cost < 0 or k < 0 or q < 0:
        raise ValueError(f"length_x_from_cost needs cost, k, q >= 0, got {cost}, {k}, {q}")
    if k == 0.0:
        return cost
    if q == 1.0:
        return math.expm1(k * cost) / k
    base = k * (1.0 - q) * cost
    if base <= -1.0:  # q > 1 bounds the cost: no x reaches it
        raise ValueError(f"no x has cost {cost} at k={k}, q={q} (the cost is bounded)")
    return math.expm1(math.log1p(base) / (1.0 - q)) / k


class LengthWeights(BaseModel):
    """How much one unit of each kind of spending adds to x."""

    model_config = ConfigDict(extra="forbid")

    thinking_tokens: float = Field(default=1.0, ge=0)
    tool_call_tokens: float = Field(default=1.0, ge=0)
    tool_output_tokens: float = Field(default=0.25, ge=0)
    final_message_tokens: float = Field(default=1.0, ge=0)
    tool_calls: float = Field(default=50.0, ge=0)
    turns: float = Field(default=100.0, ge=0)


class LengthSettings(BaseModel):
    """k, q and the weights are not published in the report; these defaults are ours."""

    model_config = ConfigDict(extra="forbid")

    k: float = Field(default=1e-3, ge=0)
    q: float = Field(default=0.5, ge=0)
    weights: LengthWeights = Field(default_factory=LengthWeights)
    weight: float = Field(default=1e-4, ge=0)
    charged: Literal["always", "solved"] = Field(
        default="solved",
        description="which episodes pay: only those whose tests all passed, or every one. "
        "Charged on every episode, the cost ranks failures too, and a short failure beats a "
        "long one: RL from pt2000 learned to end failing episodes early on a turn with no "
        "tool call (0.08 of training episodes to 0.28) and its greedy test running fell from "
        "0.52 to 0.26; charged on solutions only, it did not (0.61, +0.347 +- 0.055 paired; "
        "docs/rl/2026-12-06-rl-length-solved.md). Charged on solutions only, length ranks "
        "solutions and never makes a failure look better than a longer success",
    )


def length_x(episode: Episode, weights: LengthWeights) -> float:
    tokens = episode.tokens
    return (
        weights.thinking_tokens * tokens.thinking
        + weights.tool_call_tokens * tokens.tool_call
        + weights.tool_output_tokens * tokens.tool_output
        + weights.final_message_tokens * tokens.final_message
        + weights.tool_calls * episode.num_tool_calls
        + weights.turns * episode.num_turns
    )


class LengthPenalty(ConfiguredPlugin[LengthSettings]):
    name = "length"
    settings_type = LengthSettings

    @hookimpl
    def composer_reward(self, episode: Episode) -> RewardComponent:
        settings = self.settings
        x = length_x(episode, settings.weights)
        if settings.charged == "solved" and not episode.test_results.all_passed:
            return RewardComponent(
                name="length", value=0.0, weight=settings.weight, details=f"x={x:g}, unsolved"
            )
        return RewardComponent(
            name="length",
            value=-length_cost(x, settings.k, settings.q),
            weight=settings.weight,
            details=f"x={x:g}",
        )
