"""A short, real RL-shaped run used by the SIGKILL test (run in a forked child process).

A single epoch over the prompts in a seeded order (its state is one position); a tiny
bigram policy samples a group of completions per prompt; rewards and group-relative
advantages; groups persisted the moment they are finished, one step ahead of training (as
an asynchronous pipeline would); an Adam step on a policy-gradient loss; a step checkpoint
after every step. Restarted after a kill, it resumes from the latest checkpoint and
reuses persisted groups instead of regenerating them.
"""

from __future__ import annotations

import argparse
import random
from multiprocessing.connection import Connection
from pathlib import Path

import torch
from torch import nn

from composer_infra.checkpoint import (
    FinishedGroup,
    GroupStore,
    StepCheckpointer,
    Trajectory,
)

VOCAB = 16


def group_id(prompt: int) -> str:
    return f"prompt-{prompt:05d}"


def generate_group(policy: nn.Embedding, prompt: int, size: int, version: int) -> FinishedGroup:
    episodes = []
    rewards = []
    samples = []
    with torch.no_grad():
        for i in range(size):
            token, tokens, logprobs = prompt % VOCAB, [], []
            for _ in range(6):
                dist = torch.distributions.Categorical(logits=policy.weight[token])
                token = int(dist.sample())
                tokens.append(token)
                logprobs.append(float(dist.log_prob(torch.tensor(token))))
            samples.append((i, tokens, logprobs))
            rewards.append(sum(t == (prompt * 7) % VOCAB for t in tokens) / len(tokens))
    mean = sum(rewards) / len(rewards)
    for (i, tokens, logprobs), reward in zip(samples, rewards, strict=True):
        episodes.append(
            Trajectory(
                tokens=[prompt % VOCAB, *tokens],
                sampled=[False, *([True] * len(tokens))],
                logprobs=[0.0, *logprobs],
                versions=[-1, *([version] * len(tokens))],
                reward=reward,
                advantage=reward - mean,
                episode_id=f"{group_id(prompt)}-{i}",
            )
        )
    return FinishedGroup(group_id=group_id(prompt), prompt_id=prompt, episodes=episodes)


def loss_of(policy: nn.Embedding, groups: list[FinishedGroup]) -> torch.Tensor:
    total = torch.zeros(())
    for group in groups:
        for ep in group.episodes:
            logp = torch.log_softmax(policy.weight[ep.tokens[:-1]], dim=-1)
            taken = logp.gather(1, torch.tensor(ep.tokens[1:])[:, None]).sum()
            assert ep.advantage is not None
            total = total - ep.advantage * taken
    return total / 6.0  # Dr. GRPO: a constant, not the sequence length


def run(
    run_dir: Path,
    *,
    prompts: int = 48,
    group_size: int = 4,
    groups_per_step: int = 2,
    seed: int = 0,
    ready: Connection | None = None,
) -> None:
    """Run (or resume) the whole single-epoch run in `run_dir`.

    With `ready`, sends "ready" once resumed and then each step number once checkpointed.
    """
    torch.set_num_threads(1)  # tiny ops: thread pools only add contention
    torch.manual_seed(seed)
    policy = nn.Embedding(VOCAB, VOCAB)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    order = list(range(prompts))
    random.Random(seed).shuffle(order)
    position = 0  # prompts handed out so far
    checkpoints = StepCheckpointer(run_dir / "ckpt", keep_last=2)
    groups = GroupStore(run_dir / "groups")
    step, trained, consumed = 0, [], []
    state = checkpoints.load(policy, optimizer)
    if state is not None:
        assert state.sampler["num_items"] == prompts and state.sampler["seed"] == seed
        position = state.sampler["position"]
        step, trained, consumed = state.step, state.extra["trained"], state.extra["consumed"]
    if ready is not None:
        ready.send("ready")

    while position < prompts:
        batch = order[position : position + groups_per_step]
        position += len(batch)
        # Generation runs one step ahead of training, so persisted-but-untrained groups exist.
        for prompt in batch + order[position : position + groups_per_step]:
            if group_id(prompt) not in groups:
                groups.put(generate_group(policy, prompt, group_size, version=step))
        finished = [groups.get(group_id(p)) for p in batch]
        loss = loss_of(policy, finished)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        trained = [*trained, *batch]
        consumed = [*consumed, *(g.group_id for g in finished)]
        checkpoints.save(
            step=step,
            model=policy,
            optimizer=optimizer,
            sampler={"num_items": prompts, "seed": seed, "position": position},
            policy_version=step,
            extra={"trained": trained, "consumed": consumed},
        )
        if ready is not None:
            ready.send(step)  # progress, so a killer can aim at the middle of the run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(args.run_dir, prompts=args.prompts, seed=args.seed)


if __name__ == "__main__":
    main()
