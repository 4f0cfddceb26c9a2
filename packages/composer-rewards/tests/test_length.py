"""The length penalty against the report's formula, its limits, and its shape."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from composer_rewards import Episode, TestResults, TokenCounts, length_cost, length_x_from_cost
from composer_rewards.rewards.length import LengthPenalty, LengthSettings, LengthWeights


def reference(x: float, k: float, q: float) -> float:
    """The report's formula, written out literally."""
    return ((1 + k * x) ** (1 - q) - 1) / (k * (1 - q))


@pytest.mark.parametrize(
    ("x", "k", "q"), [(0.0, 0.01, 0.5), (10.0, 0.01, 0.5), (2850.0, 1e-3, 0.5), (500.0, 0.1, 2.0)]
)
def test_matches_the_formula(x: float, k: float, q: float) -> None:
    assert length_cost(x, k, q) == pytest.approx(reference(x, k, q), rel=1e-12)


def test_closed_forms() -> None:
    # q = 0 is linear, q = 2 is x / (1 + kx), q = 1 is ln(1 + kx) / k.
    assert length_cost(123.0, 0.05, 0.0) == pytest.approx(123.0, rel=1e-12)
    assert length_cost(123.0, 0.05, 2.0) == pytest.approx(123.0 / (1 + 0.05 * 123.0), rel=1e-12)
    assert length_cost(123.0, 0.05, 1.0) == pytest.approx(math.log(1 + 0.05 * 123.0) / 0.05)


@given(
    x=st.floats(0, 1e6),
    k=st.floats(1e-6, 1.0),
)
def test_q_one_is_the_limit(x: float, k: float) -> None:
    at_one = length_cost(x, k, 1.0)
    for q in (1 - 1e-9, 1 + 1e-9):
        assert length_cost(x, k, q) == pytest.approx(at_one, rel=1e-6, abs=1e-9)


@given(x=st.floats(0, 1e6), q=st.floats(0, 4))
def test_k_to_zero_is_x(x: float, q: float) -> None:
    assert length_cost(x, 0.0, q) == x
    assert length_cost(x, 1e-12, q) == pytest.approx(x, rel=1e-5, abs=1e-9)


@given(
    a=st.floats(0, 1e5),
    b=st.floats(0, 1e5),
    k=st.floats(1e-5, 1.0),
    q=st.floats(0.05, 4.0),
)
def test_increasing_and_concave(a: float, b: float, k: float, q: float) -> None:
    lo, hi = sorted((a, b))
    c_lo, c_hi = length_cost(lo, k, q), length_cost(hi, k, q)
    mid = length_cost((lo + hi) / 2, k, q)
    tol = 1e-9 * max(1.0, c_hi)
    assert c_lo <= c_hi + tol  # increasing (strictly in exact arithmetic; see below)
    assert mid >= (c_lo + c_hi) / 2 - tol  # concave: above the chord


@given(x=st.floats(0, 1e4), dx=st.floats(1.0, 1e4), q=st.floats(0.05, 4.0))
def test_strictly_increasing_where_floats_can_tell(x: float, dx: float, q: float) -> None:
    # C'(x) = (1 + kx)^-q: with k = 1e-3 and x + dx <= 2e4, the step is well above rounding.
    assert length_cost(x + dx, 1e-3, q) > length_cost(x, 1e-3, q)


def test_rejects_negative_inputs() -> None:
    with pytest.raises(ValueError, match="x, k, q >= 0"):
        length_cost(-1.0, 0.1, 0.5)


def test_penalty_uses_the_weighted_sum_of_what_the_episode_spent() -> None:
    episode = Episode(
        task="t",
        tokens=TokenCounts(thinking=1000, tool_call=200, tool_output=4000, final_message=100),
        num_tool_calls=5,
        num_turns=3,
        test_results=TestResults(passed=1),  # the default charges solutions only
    )
    # Default weights: 1000 + 200 + 0.25 * 4000 + 100 + 50 * 5 + 100 * 3 = 2850.
    component = LengthPenalty().composer_reward(episode)
    assert component.details == "x=2850"
    assert component.value == pytest.approx(-reference(2850.0, 1e-3, 0.5), rel=1e-12)
    assert component.weight == 1e-4

    only_turns = LengthSettings(
        k=0.5,
        q=1.0,
        weights=LengthWeights(
            thinking_tokens=0,
            tool_call_tokens=0,
            tool_output_tokens=0,
            final_message_tokens=0,
            tool_calls=0,
            turns=2.0,
        ),
    )
    component = LengthPenalty(only_turns).composer_reward(episode)
    assert component.value == pytest.approx(-math.log(1 + 0.5 * 6.0) / 0.5)


def test_charged_on_solutions_only_leaves_failures_and_untested_episodes_free() -> None:
    """A failure must never outscore a longer success, and an episode whose tests never
    ran (collection broken, a crashed command) is no solution to charge either."""
    penalty = LengthPenalty()
    penalty.composer_configure({"rewards": {"length": {"charged": "solved", "k": 0.0}}})
    spent = {"tokens": TokenCounts(thinking=40), "num_tool_calls": 0, "num_turns": 0}
    solved = Episode(task="t", test_results=TestResults(passed=3), **spent)
    failed = Episode(task="t", test_results=TestResults(passed=2, failed=1), **spent)
    errored = Episode(task="t", test_results=TestResults(passed=2, errors=1), **spent)
    untested = Episode(task="t", **spent)
    assert penalty.composer_reward(solved).value == -40.0
    for episode in (failed, errored, untested):
        component = penalty.composer_reward(episode)
        assert component.value == 0.0 and "unsolved" in component.details
    assert LengthPenalty().composer_reward(failed).value == 0.0  # the default charges solutions
    charge_all = LengthPenalty(LengthSettings(charged="always", k=0.0))
    for episode in (failed, errored, untested):
        assert charge_all.composer_reward(episode).value == -40.0
    with pytest.raises(ValueError, match=r"rewards\.length\.charged: Input should be"):
        penalty.composer_configure({"rewards": {"length": {"charged": "sometimes"}}})


def test_configuration_arrives_through_the_hook_and_is_validated() -> None:
    penalty = LengthPenalty()
    penalty.composer_configure({"rewards": {"length": {"k": 0.0, "q": 3.0, "weight": 2.0}}})
    assert (penalty.settings.k, penalty.settings.q, penalty.settings.weight) == (0.0, 3.0, 2.0)
    episode = Episode(task="t", tokens=TokenCounts(thinking=7), test_results=TestResults(passed=1))
    assert penalty.composer_reward(episode).value == -7.0  # k = 0: C(x) = x
    with pytest.raises(
        ValueError,
        match=r"rewards\.length\.k: Input should be greater than or equal to 0 \(got -1\)",
    ):
        penalty.composer_configure({"rewards": {"length": {"k": -1}}})
    with pytest.raises(ValueError, match=r"rewards\.length\.kk: Extra inputs are not permitted"):
        penalty.composer_configure({"rewards": {"length": {"kk": 1}}})


@given(
    x=st.floats(0, 1e5),
    k=st.sampled_from([0.0, 1e-3, 0.05]),
    q=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
)
def test_the_inverse_recovers_x(x: float, k: float, q: float) -> None:
    assert length_x_from_cost(length_cost(x, k, q), k, q) == pytest.approx(x, rel=1e-6, abs=1e-6)


def test_the_inverse_refuses_a_cost_no_x_reaches() -> None:
    # With q = 2 the cost is bounded by 1 / k.
    with pytest.raises(ValueError, match="bounded"):
        length_x_from_cost(1.0 / 0.05, 0.05, 2.0)
    with pytest.raises(ValueError, match=">= 0"):
        length_x_from_cost(-1.0, 1e-3, 0.5)
