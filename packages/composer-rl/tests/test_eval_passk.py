"""The unbiased pass@k estimator against its definition by enumeration."""

from __future__ import annotations

import itertools
import math

import pytest

from composer_rl.eval import pass_at_k


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_matches_enumeration_of_k_subsets(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert math.isclose(pass_at_k(n, c, k), expected, rel_tol=1e-12, abs_tol=1e-12)


def test_pass_at_1_is_the_solve_rate() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)
