"""Step and group checkpoints: exact resume, write-once groups, fallback past damage."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from composer_infra.checkpoint import (
    CheckpointError,
    FinishedGroup,
    GroupExists,
    GroupFileError,
    GroupStore,
    StepCheckpointer,
    Trajectory,
    atomic_directory,
)


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
    sampler = {"num_items": 10, "seed": 3, "position": 4}
    train(model, opt, 3)
    ckpt = StepCheckpointer(tmp_path)
    ckpt.save(
        step=3, model=model, optimizer=opt, sampler=sampler, policy_version=3, extra={"note": "x"}
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
    assert state.sampler == sampler and state.extra == {"note": "x"}
    assert resumed.head.weight is resumed.embed.weight  # tie survives
    assert train(resumed, resumed_opt, 3) == expected_losses
    for name, tensor in resumed.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_a_checkpoint_with_the_old_plugins_list_still_loads(tmp_path: Path) -> None:
    """Checkpoints written before `StepState.plugins` was dropped hold ``"plugins": []``."""
    model = nn.Linear(2, 2)
    ckpt = StepCheckpointer(tmp_path)
    path = ckpt.save(
        step=1,
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        sampler={},
        policy_version=1,
    )
    state = json.loads((path / "state.json").read_text())
    assert "plugins" not in state
    (path / "state.json").write_text(json.dumps({**state, "plugins": []}, indent=1))
    loaded = ckpt.load(nn.Linear(2, 2))
    assert loaded is not None and loaded.step == 1 and loaded.sampler == {}


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


def episode(i: int, n: int = 3) -> Trajectory:
    return Trajectory(
        tokens=[1, 2, *range(n)],
        sampled=[False, False, *([True] * n)],
        logprobs=[0.0, 0.0, *([-0.5] * n)],
        versions=[-1, -1, *([5] * n)],
        reward=float(i),
        advantage=i - 0.5,
        episode_id=f"e{i}",
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


def test_a_group_file_of_another_format_is_one_line_naming_it(tmp_path: Path) -> None:
    store = GroupStore(tmp_path)
    # The format before one trajectory type: prompt / completion split, no per-token lists.
    old = '{"group_id": "p0", "prompt_id": 0, "episodes": [{"prompt": [1], "completion": [2]}]}'
    (tmp_path / "p0.json").write_text(old)
    (tmp_path / "p1.json").write_text('{"group_id": "p1", "prompt')  # cut off mid-write
    for gid in ("p0", "p1"):
        with pytest.raises(GroupFileError) as caught:
            store.get(gid)
        message = str(caught.value)
        assert "\n" not in message and f"{gid}.json" in message and "new one" in message


def test_trajectory_token_alignment_is_checked() -> None:
    with pytest.raises(ValueError, match="per-token fields of lengths"):
        Trajectory(tokens=[1, 2, 3], sampled=[False, True, True], logprobs=[0.0], versions=[0])
    # A persisted group is checked the same way when it is read back.
    good = FinishedGroup(group_id="p", prompt_id=0, episodes=[episode(0)])
    data = good.model_dump_json().replace('"versions":[-1,-1,5,5,5]', '"versions":[-1,-1,-1,5,5]')
    with pytest.raises(ValueError, match="carry no policy version"):
        FinishedGroup.model_validate_json(data)


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
