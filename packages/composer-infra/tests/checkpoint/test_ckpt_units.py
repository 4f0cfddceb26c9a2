"""Step, group and rollout checkpoints: exact resume, write-once groups, handover of rollouts."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from composer_infra.checkpoint import (
    CheckpointError,
    EpisodeRecord,
    FinishedGroup,
    GroupExists,
    GroupStore,
    RolloutCheckpoint,
    RolloutStore,
    SingleEpochSampler,
    StepCheckpointer,
    atomic_directory,
)
from composer_infra.store import FileStore


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 32, bias=False)
        self.head.weight = self.embed.weight  # tied, as small LMs do

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.mlp(self.embed(ids)))


def train(model: TiedLM, opt: torch.optim.Optimizer, steps: int) -> list[float]:
    """Steps that consume every RNG a trainer might: torch, numpy, python."""
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 32, (4, 6))
        noise = float(np.random.rand()) * 1e-3 + random.random() * 1e-3
        loss = nn.functional.cross_entropy(
            model(ids[:, :-1]).reshape(-1, 32), ids[:, 1:].reshape(-1)
        )
        opt.zero_grad()
        (loss + noise).backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_resume_is_bit_exact(tmp_path: Path) -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = TiedLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = SingleEpochSampler(10, seed=3)
    train(model, opt, 3)
    sampler.take(4)
    ckpt = StepCheckpointer(tmp_path)
    ckpt.save(
        step=3,
        model=model,
        optimizer=opt,
        sampler=sampler.state_dict(),
        policy_version=3,
        plugins=[{"name": "style", "weight": 0.5}],
        extra={"note": "x"},
    )
    expected_losses = train(model, opt, 3)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    resumed = TiedLM()
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1e-3)
    torch.manual_seed(123)  # scramble the RNGs: the checkpoint must restore them
    np.random.seed(123)
    random.seed(123)
    state = StepCheckpointer(tmp_path).load(resumed, resumed_opt)
    assert state is not None and state.step == 3 and state.policy_version == 3
    assert state.plugins == [{"name": "style", "weight": 0.5}] and state.extra == {"note": "x"}
    resumed_sampler = SingleEpochSampler(10, seed=3)
    resumed_sampler.load_state_dict(state.sampler)
    assert resumed_sampler.peek(10) == sampler.peek(10)
    assert resumed.head.weight is resumed.embed.weight  # tie survives
    assert train(resumed, resumed_opt, 3) == expected_losses
    for name, tensor in resumed.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_retention_and_latest(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = StepCheckpointer(tmp_path, keep_last=2)
    paths = [
        ckpt.save(step=s, model=model, optimizer=opt, sampler={}, policy_version=s)
        for s in range(4)
    ]
    assert ckpt.latest() == paths[-1]
    assert ckpt.checkpoints() == sorted(paths[-2:])
    (tmp_path / "latest").write_text("step-99999999-deadbeef")
    with pytest.raises(CheckpointError, match="does not exist"):
        ckpt.latest()


def test_no_checkpoint_loads_as_none_and_leftovers_are_cleared(tmp_path: Path) -> None:
    (tmp_path / ".tmp-step-00000001-abc.1234").mkdir()
    ckpt = StepCheckpointer(tmp_path)
    assert not any(tmp_path.iterdir())
    assert ckpt.load(nn.Linear(1, 1)) is None


def test_failed_directory_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "step-1") as tmp:
        (tmp / "a").write_text("x")
        raise RuntimeError("writer failed")
    assert list(tmp_path.iterdir()) == []


def test_sampler_single_epoch_and_mismatch() -> None:
    sampler = SingleEpochSampler(7, seed=1)
    taken = sampler.take(3) + sampler.take(3) + sampler.take(3)
    assert sorted(taken) == list(range(7)) and sampler.exhausted
    with pytest.raises(ValueError, match="same prompt set and seed"):
        SingleEpochSampler(8, seed=1).load_state_dict(sampler.state_dict())


def episode(i: int, n: int = 3) -> EpisodeRecord:
    return EpisodeRecord(
        episode_id=f"e{i}",
        prompt_tokens=[1, 2],
        completion_tokens=list(range(n)),
        policy_versions=[5] * n,
        logprobs=[-0.5] * n,
        reward=float(i),
        advantage=i - 0.5,
    )


def test_groups_are_write_once_and_pending_ones_are_found(tmp_path: Path) -> None:
    store = GroupStore(tmp_path)
    g0 = FinishedGroup(group_id="p0", prompt_id=0, episodes=[episode(0), episode(1)])
    g1 = FinishedGroup(group_id="p1", prompt_id=1, episodes=[episode(2)])
    store.put(g0)
    store.put(g1)
    with pytest.raises(GroupExists, match="already persisted"):
        store.put(g0)
    assert store.get("p0") == g0
    assert [g.group_id for g in store.pending({"p0"})] == ["p1"]


def test_episode_token_alignment_is_checked() -> None:
    with pytest.raises(ValueError, match="policy versions for 3 completion tokens"):
        EpisodeRecord(
            episode_id="e",
            prompt_tokens=[],
            completion_tokens=[1, 2, 3],
            policy_versions=[0],
            reward=0.0,
            advantage=0.0,
        )


class ToyWorker:
    """Generates a rollout token by token, checkpointing after each; resumable anywhere."""

    def __init__(self, name: str, store: RolloutStore) -> None:
        self.name, self.store = name, store

    def run(
        self, rollout_id: str, prompt: int, length: int, stop_after: int | None = None
    ) -> RolloutCheckpoint:
        ck = self.store.load(rollout_id) or RolloutCheckpoint(
            rollout_id=rollout_id, prompt_id=prompt
        )
        while len(ck.tokens) < length:
            if stop_after is not None and len(ck.tokens) >= stop_after:
                return ck  # the worker "dies" here; its progress is in the store
            pos = len(ck.tokens)
            g = torch.Generator().manual_seed(prompt * 1000 + pos)  # position-keyed sampling
            token = int(torch.randint(0, 100, (1,), generator=g))
            ck = ck.model_copy(
                update={
                    "tokens": [*ck.tokens, token],
                    "logprobs": [*ck.logprobs, -1.0],
                    "policy_versions": [*ck.policy_versions, 7],
                    "sandbox_snapshot": f"snap://{rollout_id}/{pos}",
                    "worker": self.name,
                }
            )
            self.store.save(ck)
        return ck.model_copy(update={"done": True})


def test_rollout_resumes_on_another_worker(tmp_path: Path) -> None:
    store = RolloutStore(FileStore(tmp_path))
    uninterrupted = ToyWorker("solo", RolloutStore(FileStore(tmp_path / "solo"))).run("r1", 4, 10)
    partial = ToyWorker("a", store).run("r1", 4, 10, stop_after=6)
    assert len(partial.tokens) == 6 and store.ids() == ["r1"]
    saved = store.load("r1")
    assert saved is not None and saved.sandbox_snapshot == "snap://r1/5" and saved.worker == "a"
    finished = ToyWorker("b", store).run("r1", 4, 10)
    assert finished.tokens == uninterrupted.tokens
    assert finished.worker == "b" and finished.done
    store.delete("r1")
    assert store.load("r1") is None


def test_a_damaged_newest_checkpoint_is_reported_and_the_one_before_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = nn.Linear(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = StepCheckpointer(tmp_path, keep_last=3)
    ckpt.save(step=1, model=model, optimizer=opt, sampler={"position": 1}, policy_version=1)
    at_step_1 = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)
    newest = ckpt.save(step=2, model=model, optimizer=opt, sampler={}, policy_version=2)
    # Damage the newest checkpoint's weights after the fact (a bad disk, a truncated copy).
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:40])

    fresh = nn.Linear(3, 3)
    with caplog.at_level(logging.WARNING, logger="composer_infra.checkpoint.step"):
        state = ckpt.load(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1))
    assert state is not None and state.step == 1 and state.sampler == {"position": 1}
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, at_step_1[name]), name
    assert newest.name in caplog.text and "unreadable" in caplog.text

    # Asked for that checkpoint by path, the damage is an error, not a silent fallback.
    with pytest.raises(CheckpointError, match="unreadable"):
        ckpt.load(fresh, path=newest)


def test_when_every_checkpoint_is_damaged_loading_fails_naming_them(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = StepCheckpointer(tmp_path, keep_last=2)
    for step in (1, 2):
        path = ckpt.save(step=step, model=model, optimizer=opt, sampler={}, policy_version=step)
        (path / "optimizer.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="no readable checkpoint") as raised:
        ckpt.load(nn.Linear(2, 2), torch.optim.SGD(model.parameters(), lr=0.1))
    assert "step-00000001" in str(raised.value) and "step-00000002" in str(raised.value)
