"""Global packing: every sequence placed once, balanced compute, equal micro-batch counts."""

from __future__ import annotations

import random

import pytest

from composer_model import preset
from composer_parallel.packing import (
    attention_cost_ratio,
    greedy,
    imbalance,
    karmarkar_karp,
    plan_global_batch,
    round_robin,
    sequence_cost,
)


def _heavy_tail(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [max(1, int(rng.lognormvariate(7.0, 1.2))) for _ in range(n)]


def test_karmarkar_karp_on_a_known_instance() -> None:
    # {8,7,6,5,4} two ways: differencing leaves a spread of 2 (the optimum is 0: 15 / 15)
    groups = karmarkar_karp([8, 7, 6, 5, 4], 2)
    sums = sorted(sum([8, 7, 6, 5, 4][i] for i in g) for g in groups)
    assert sums == [14, 16]
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("parts", [2, 8, 32])
def test_every_method_places_every_sequence_once(parts: int) -> None:
    costs = [sequence_cost(n, 500.0) for n in _heavy_tail(300, parts)]
    for method in (karmarkar_karp, greedy, round_robin):
        groups = method(costs, parts)
        assert len(groups) == parts
        assert sorted(i for g in groups for i in g) == list(range(len(costs)))


def test_karmarkar_karp_balances_better_than_round_robin_and_no_worse_than_greedy() -> None:
    for seed in range(5):
        costs = [sequence_cost(n, 500.0) for n in _heavy_tail(256, seed)]
        kk = imbalance(costs, karmarkar_karp(costs, 16))
        assert kk < imbalance(costs, round_robin(costs, 16))
        assert kk <= imbalance(costs, greedy(costs, 16)) + 1e-9
        # no partition beats the heaviest single sequence; short of that, within 5 %
        floor = max(costs) / (sum(costs) / 16)
        assert kk < max(1.05, floor * 1.0001)


def test_plan_gives_every_rank_the_same_number_of_micro_batches() -> None:
    lengths = _heavy_tail(200, 3)
    lengths = [min(n, 4096) for n in lengths]
    plan = plan_global_batch(lengths, dp=4, a=attention_cost_ratio(preset("tiny")), max_tokens=8192)
    counts = {len(rank) for rank in plan}
    assert len(counts) == 1 and counts.pop() > 1
    placed = sorted(i for rank in plan for mb in rank for i in mb.sequences)
    assert placed == list(range(len(lengths)))
    for rank in plan:
        for mb in rank:
            assert mb.num_tokens == sum(lengths[i] for i in mb.sequences)
            assert mb.cu_seqlens[0] == 0


def test_cost_ratio_grows_with_the_model() -> None:
    # linear work per token relative to attention work per pair: far larger for Kimi K2
    assert attention_cost_ratio(preset("kimi-k2")) > 10 * attention_cost_ratio(preset("tiny"))


def test_bad_plans_are_refused_with_what_to_change() -> None:
    with pytest.raises(ValueError, match="raise max_tokens or"):
        plan_global_batch([10, 5000], dp=1, a=1.0, max_tokens=4096)
    with pytest.raises(ValueError, match="cannot give each of dp=4"):
        plan_global_batch([10, 20], dp=4, a=1.0)
    with pytest.raises(ValueError, match="at least one token"):
        plan_global_batch([0, 3], dp=1, a=1.0)
    with pytest.raises(ValueError, match="number of parts"):
        karmarkar_karp([1.0], 0)
