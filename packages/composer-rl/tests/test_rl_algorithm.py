"""The RL objective against hand-computed values."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from composer_rl.rl.algorithm import (
    group_advantages,
    kl_k1,
    kl_k3,
    policy_gradient_loss,
    rl_objective,
    truncated_is_weights,
)


def test_advantages_are_reward_minus_group_mean_without_std_division() -> None:
    result = group_advantages([1.0, 0.0, 0.0, 1.0, 3.0])
    assert result.baseline == pytest.approx(1.0)
    assert result.advantages == pytest.approx([0.0, -1.0, -1.0, 0.0, 2.0])
    assert not result.constant


def test_missing_reward_is_left_out_of_the_baseline_not_scored_zero() -> None:
    result = group_advantages([1.0, None, 0.0, 0.0])
    # Baseline over the three valid rewards (1/3), not over four with a zero.
    assert result.baseline == pytest.approx(1 / 3)
    assert result.advantages[1] is None
    assert result.advantages[0] == pytest.approx(2 / 3)
    assert result.valid == 3


def test_constant_group_carries_no_signal() -> None:
    assert group_advantages([0.5, 0.5, 0.5]).constant
    assert group_advantages([None, None]).baseline is None


def test_non_finite_reward_is_an_error() -> None:
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, math.nan])


def test_k1_and_k3_by_hand() -> None:
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.4)])
    assert kl_k1(logp, ref).tolist() == pytest.approx([math.log(2), math.log(0.5)])
    # r = ref / pi: 0.5 and 2.0 -> (r - 1) - log r
    expected = [(0.5 - 1) - math.log(0.5), (2.0 - 1) - math.log(2.0)]
    assert kl_k3(logp, ref).tolist() == pytest.approx(expected)
    assert (kl_k3(logp, ref) >= 0).all()


def test_truncated_importance_weights_cap_and_count() -> None:
    train = torch.log(torch.tensor([0.5, 0.9, 0.1]))
    behaviour = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    weights, capped = truncated_is_weights(train, behaviour, cap=2.0)
    assert weights.tolist() == pytest.approx([1.0, 2.0, 0.5])
    assert capped.tolist() == [False, True, False]
    off, none = truncated_is_weights(train, behaviour, cap=None)
    assert off.tolist() == [1.0, 1.0, 1.0] and not none.any()
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(train, behaviour, cap=0.0)


def test_policy_gradient_loss_and_its_gradient_by_hand() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5, -3.0], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -2.0, 5.0])
    w = torch.tensor([1.0, 0.5, 1.0, 1.0])
    mask = torch.tensor([True, True, True, False])
    loss = policy_gradient_loss(logp, adv, w, mask, normalizer=10.0)
    # -(1*1*-1 + 0.5*1*-2 + 1*-2*-0.5) / 10 = -(-1 - 1 + 1) / 10 = 0.1
    assert float(loss) == pytest.approx(0.1)
    loss.backward()
    assert logp.grad is not None
    assert logp.grad.tolist() == pytest.approx([-0.1, -0.05, 0.2, 0.0])


def test_loss_is_not_normalised_per_sequence_length() -> None:
    # Doubling a sequence's tokens doubles its contribution (the divisor is a constant).
    one = policy_gradient_loss(
        torch.tensor([-1.0]),
        torch.tensor([1.0]),
        torch.ones(1),
        torch.ones(1, dtype=torch.bool),
        4.0,
    )
    two = policy_gradient_loss(
        torch.tensor([-1.0, -1.0]),
        torch.tensor([1.0, 1.0]),
        torch.ones(2),
        torch.ones(2, dtype=torch.bool),
        4.0,
    )
    assert float(two) == pytest.approx(2 * float(one))


def test_kl_penalty_is_folded_into_the_advantage_detached() -> None:
    logp = torch.log(torch.tensor([0.5, 0.25])).requires_grad_()
    behaviour = logp.detach().clone()
    ref = torch.log(torch.tensor([0.25, 0.25]))
    adv = torch.tensor([1.0, 1.0])
    mask = torch.tensor([True, True])
    terms = rl_objective(
        logp, behaviour, adv, mask, normalizer=1.0, is_cap=2.0, ref_logp=ref, kl_coef=0.5
    )
    k1 = [math.log(2), 0.0]
    shaped = [1 - 0.5 * k1[0], 1.0]
    expected = -(shaped[0] * math.log(0.5) + shaped[1] * math.log(0.25))
    assert float(terms.loss) == pytest.approx(expected)
    terms.loss.backward()
    assert logp.grad is not None
    # The gradient is -w * A_t: the penalty does not differentiate through log pi.
    assert logp.grad.tolist() == pytest.approx([-shaped[0], -shaped[1]])
    assert terms.k1_mean == pytest.approx(sum(k1) / 2)
    # Per-token variances over the sampled tokens (population form): k1 = (ln 2, 0) and
    # k3 = (r - 1) - ln r with r = pi_ref / pi = (1/2, 1): (ln 2 - 1/2, 0).
    assert terms.k1_var == pytest.approx((math.log(2) / 2) ** 2)
    assert terms.k3_var == pytest.approx(((math.log(2) - 0.5) / 2) ** 2)
    assert terms.is_capped_share == 0.0
    assert terms.mismatch_mean == pytest.approx(0.0)


def test_k3_selectable_as_the_penalty() -> None:
    logp = torch.log(torch.tensor([0.5]))
    ref = torch.log(torch.tensor([0.25]))
    args = (logp, logp.clone(), torch.tensor([0.0]), torch.tensor([True]))
    k1_terms = rl_objective(*args, normalizer=1.0, is_cap=None, ref_logp=ref, kl_coef=1.0)
    k3_terms = rl_objective(
        *args, normalizer=1.0, is_cap=None, ref_logp=ref, kl_coef=1.0, kl_estimator="k3"
    )
    k3 = (0.5 - 1) - math.log(0.5)
    assert float(k1_terms.loss) == pytest.approx(math.log(2) * math.log(0.5))
    assert float(k3_terms.loss) == pytest.approx(k3 * math.log(0.5))


def test_shapes_must_line_up() -> None:
    with pytest.raises(ValueError, match="one shape"):
        rl_objective(
            torch.zeros(3), torch.zeros(2), torch.zeros(3), torch.ones(3), normalizer=1, is_cap=None
        )


def test_staleness_bound_counts_queue_time() -> None:
    from collections import deque

    from _rl_helpers import trajectory

    from composer_rl.rl.orchestrator import ReadyGroup, take_fresh

    def group(name: str, oldest: int) -> ReadyGroup:
        return ReadyGroup(name, name, [trajectory([oldest])])

    ready = deque([group("a", 5), group("b", 1), group("c", 4), group("d", 6)])
    # Trainer at version 6, bound 3: "b" waited until it is 5 versions behind: dropped.
    fresh, stale = take_fresh(ready, version=6, wanted=2, max_off_policy_steps=3)
    assert [g.group_id for g in fresh] == ["a", "c"]
    assert [g.group_id for g in stale] == ["b"]
    assert [g.group_id for g in ready] == ["d"]
    # The same group is fresh at an earlier trainer version: lag is measured now.
    fresh, stale = take_fresh(deque([group("b", 1)]), version=4, wanted=1, max_off_policy_steps=3)
    assert [g.group_id for g in fresh] == ["b"] and not stale


def test_a_slow_trainer_pauses_generation_instead_of_queueing_stale_groups() -> None:
    from composer_rl.rl.orchestrator import OrchestratorConfig, wants_more_groups

    config = OrchestratorConfig(max_groups_in_flight=3, groups_per_step=2)
    assert wants_more_groups(config, open_=2, ready=0, training=True)
    assert not wants_more_groups(config, open_=3, ready=0, training=True)  # slots full
    # One batch may wait beyond the slots; more would only age in the queue.
    assert wants_more_groups(config, open_=2, ready=2, training=True)
    assert not wants_more_groups(config, open_=2, ready=3, training=True)
    assert not wants_more_groups(config, open_=0, ready=5, training=True)
    # Synchronous: one batch, and nothing while the trainer works.
    sync = OrchestratorConfig(max_groups_in_flight=3, groups_per_step=2, sync=True)
    assert wants_more_groups(sync, open_=1, ready=0, training=False)
    assert not wants_more_groups(sync, open_=1, ready=1, training=False)
    assert not wants_more_groups(sync, open_=0, ready=0, training=True)


def test_steps_on_a_group_move_each_episode_the_way_of_its_advantage() -> None:
    """The whole training path (packing, router-replayed forward, `rl_loss` on its outputs,
    the one `train_step`): a few steps on one group raise the log-probability of every episode with
    a positive advantage and lower every one with a negative advantage."""
    from composer_infra.checkpoint import Trajectory
    from composer_model import ComposerModel, OptimConfig, build_optimizer, preset, train_step
    from composer_rl.rl.batch import pack
    from composer_rl.rl.loss import RLLossConfig, target_logprobs
    from composer_rl.rl.trainer import rl_forward_loss

    torch.manual_seed(0)
    model = ComposerModel(preset("tiny", vocab_size=128, num_hidden_layers=2))
    prompt = torch.randint(0, 128, (6,)).tolist()
    advantages = [0.75, -0.25, -0.25, -0.25]
    group = [
        Trajectory(
            tokens=prompt + torch.randint(0, 128, (10,)).tolist(),
            sampled=[False] * 6 + [True] * 10,
            logprobs=[0.0] * 6 + [-4.8] * 10,
            versions=[-1] * 6 + [0] * 10,
            advantage=advantage,
            reward=advantage,
        )
        for advantage in advantages
    ]
    batch = pack(group)

    def sequence_logprobs() -> list[float]:
        with torch.no_grad():
            out = model(batch.input_ids, cu_seqlens=batch.cu_seqlens)
            logp = target_logprobs(out.logits, batch.input_ids, 1.0)
        mask = batch.target_mask.reshape(-1).float()
        bounds = batch.cu_seqlens.tolist()
        return [float((logp[a:b] * mask[a:b]).sum()) for a, b in itertools.pairwise(bounds)]

    before = sequence_logprobs()
    optimizer = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.0, warmup_steps=0))
    config = RLLossConfig(is_cap=None)
    for _ in range(3):
        train_step(model, optimizer, lambda: rl_forward_loss(model, batch, config), grad_clip=1.0)
    moved = [b - a for a, b in zip(before, sequence_logprobs(), strict=True)]
    assert [m > 0 for m in moved] == [a > 0 for a in advantages], moved


def test_a_group_differing_only_by_shaping_rewards_is_constant_by_correctness() -> None:
    from composer_rl.rl.orchestrator import ScoredEpisode, group_is_constant

    def episode(reward: float | None, solved: bool) -> ScoredEpisode:
        return ScoredEpisode(trajectories=[], reward=reward, solved=solved)

    failed_lengths = [episode(-0.05, False), episode(-0.07, False)]  # rewards differ
    assert not group_is_constant(failed_lengths, False, "reward")
    assert group_is_constant(failed_lengths, False, "correctness")
    mixed = [episode(0.95, True), episode(-0.05, False)]
    assert not group_is_constant(mixed, False, "correctness")
    # An infrastructure failure has no reward and does not count as a different outcome.
    assert group_is_constant([episode(None, True), *failed_lengths], False, "correctness")
    # By reward, the advantages decide (what `assign_advantages` found).
    assert group_is_constant(mixed, True, "reward")
