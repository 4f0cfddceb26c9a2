"""The SFT anchor: next-token cross-entropy on stage-one demonstrations beside the RL loss.

Why it exists: RL on the tiny policy pushed `return xs[0]` (rewarded on "return the first
element" tasks) into held-out "return the smallest element" tasks the SFT policy solved
(`runs/learn-g`; composer-rl README). The anchor keeps the demonstrations' answers to
every instruction in the loss while RL moves the policy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from composer_infra.checkpoint import Trajectory
from composer_model import ComposerModel, OptimConfig, build_optimizer, preset, train_step
from composer_model.tokenizer import train_tokenizer
from composer_rl.rl.batch import pack
from composer_rl.rl.config import load_config
from composer_rl.rl.loss import RLLossConfig, target_logprobs
from composer_rl.rl.run import anchor_source
from composer_rl.rl.services.training import TrainingConfig, TrainingService
from composer_rl.rl.trainer import rl_forward_loss
from composer_rl.stages.loop import batch_loss
from composer_rl.stages.packing import make_batch, pack_documents

VOCAB = 128


def _model() -> ComposerModel:
    torch.manual_seed(0)
    return ComposerModel(preset("tiny", vocab_size=VOCAB, num_hidden_layers=2))


def _demonstrations(count: int = 6, seed: int = 1) -> tuple[list[list[int]], list[list[bool]]]:
    generator = torch.Generator().manual_seed(seed)
    ids = [torch.randint(1, VOCAB, (20,), generator=generator).tolist() for _ in range(count)]
    masks = [[False] * 8 + [True] * 12 for _ in range(count)]  # prompt, then the agent's turn
    return ids, masks


def _group(
    answers: list[list[int]], advantages: list[float], prompt: list[int]
) -> list[Trajectory]:
    return [
        Trajectory(
            tokens=prompt + answer,
            sampled=[False] * len(prompt) + [True] * len(answer),
            logprobs=[0.0] * len(prompt) + [-4.8] * len(answer),
            versions=[-1] * len(prompt) + [0] * len(answer),
            advantage=advantage,
            reward=advantage,
        )
        for answer, advantage in zip(answers, advantages, strict=True)
    ]


def test_the_anchor_adds_its_weight_times_sfts_loss_on_the_demonstrations() -> None:
    model = _model()
    prompt = list(range(1, 7))
    batch = pack(_group([list(range(10, 20)), list(range(30, 40))], [0.5, -0.5], prompt))
    ids, masks = _demonstrations()
    rows = pack_documents(ids, 64, 0, masks=masks, split_documents=False)
    demo = make_batch(rows, [0, 1])
    plain = rl_forward_loss(model, batch, RLLossConfig(is_cap=None))
    anchored = rl_forward_loss(
        model, batch, RLLossConfig(is_cap=None, anchor_weight=0.5), anchor=demo
    )
    with torch.no_grad():
        sft = batch_loss(model, demo, mtp_weight=0.0).loss
    assert "anchor_loss" not in plain.metrics
    assert anchored.metrics["anchor_loss"] == pytest.approx(float(sft), rel=1e-6)
    assert float((anchored.loss - plain.loss).detach()) == pytest.approx(0.5 * float(sft), rel=1e-5)
    # Weight 0 with rows given is the plain loss: the knob, not the rows, turns it on.
    off = rl_forward_loss(model, batch, RLLossConfig(is_cap=None), anchor=demo)
    assert float(off.loss.detach()) == pytest.approx(float(plain.loss.detach()), rel=1e-6)


def test_the_anchor_holds_a_demonstrated_answer_that_rl_pushes_down() -> None:
    """The drift it is for: an answer the demonstrations give (to another instruction) is
    the failed sample of a group. RL alone lowers it; with the anchor it goes up."""
    ids, masks = _demonstrations(count=1)
    demonstrated = ids[0][8:]  # the demonstration's own tokens
    prompt = ids[0][:8]
    group = _group([list(range(40, 52)), demonstrated], [0.5, -0.5], prompt)
    batch = pack(group)
    rows = pack_documents(ids, 32, 0, masks=masks, split_documents=False)
    demo = make_batch(rows, [0])

    def demonstrated_logprob(model: ComposerModel) -> float:
        with torch.no_grad():
            out = model(demo.input_ids, positions=demo.positions, cu_seqlens=demo.cu_seqlens)
            logp = target_logprobs(out.logits, demo.input_ids, 1.0)
        sampled = torch.roll(demo.mask.reshape(-1), -1)  # position t predicts token t + 1
        return float(logp[sampled].sum())

    moved = {}
    for weight in (0.0, 1.0):
        model = _model()
        before = demonstrated_logprob(model)
        optimizer = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.0, warmup_steps=0))
        config = RLLossConfig(is_cap=None, anchor_weight=weight)
        for _ in range(3):
            train_step(
                model,
                optimizer,
                lambda m=model, c=config: rl_forward_loss(m, batch, c, anchor=demo),
                grad_clip=1.0,
            )
        moved[weight] = demonstrated_logprob(model) - before
    assert moved[0.0] < 0 < moved[1.0], moved


def test_the_training_service_draws_anchor_rows_by_step_and_refuses_missing_data(
    tmp_path: Path,
) -> None:
    from _services_support import micro_config

    ids, masks = _demonstrations(count=40)
    data = tmp_path / "sft_tokens.pt"
    torch.save({"train": (ids, masks), "heldout": ([], []), "train_tasks": 40}, data)
    config = TrainingConfig(
        rl=RLLossConfig(is_cap=None, anchor_weight=1.0, anchor_rows=2),
        anchor_data=str(data),
        reference=True,
        optim=OptimConfig(lr=1e-3, weight_decay=0.0, warmup_steps=0, min_lr_ratio=1.0),
    )
    group = _group([list(range(10, 20)), list(range(30, 40))], [0.5, -0.5], list(range(1, 7)))
    losses = []
    for _ in range(2):  # two services, same seed: the same rows at the same steps
        trainer = TrainingService(micro_config(), (tmp_path / "w").as_uri(), config=config)
        try:
            losses.append([trainer.train_rl(group).stats.metrics["anchor_loss"] for _ in range(3)])
        finally:
            trainer.close()
    assert losses[0] == losses[1]
    assert len(set(losses[0])) == 3  # other rows (or the moved policy) at every step
    missing = config.model_copy(update={"anchor_data": str(tmp_path / "none.pt")})
    with pytest.raises(FileNotFoundError, match=r"train\.anchor_data"):
        TrainingService(micro_config(), (tmp_path / "w2").as_uri(), config=missing)


def test_the_rl_config_finds_the_demonstrations_of_the_policys_stage_one_run(
    tmp_path: Path,
) -> None:
    final = tmp_path / "stage1" / "sft" / "final"
    final.mkdir(parents=True)
    tokenizer = train_tokenizer(["def f(x):\n    return x\n"] * 4, vocab_size=300)
    tokenizer.save(final / "tokenizer.json")
    off = load_config(None, {"model": str(final)})
    assert anchor_source(off) == (None, 0)
    on = load_config(None, {"model": str(final), "loss.anchor_weight": 0.1})
    with pytest.raises(FileNotFoundError, match=r"train\.anchor_data"):
        anchor_source(on)
    (tmp_path / "stage1" / "sft_tokens.pt").write_bytes(b"")
    path, eos = anchor_source(on)
    assert path == tmp_path / "stage1" / "sft_tokens.pt" and eos == tokenizer.eos_id
    elsewhere = tmp_path / "other.pt"
    elsewhere.write_bytes(b"")
    chosen = load_config(
        None, {"model": str(final), "loss.anchor_weight": 0.1, "train.anchor_data": str(elsewhere)}
    )
    assert anchor_source(chosen)[0] == elsewhere
    parallel = load_config(None, {"model": str(final), "loss.anchor_weight": 0.1, "train.dp": 2})
    with pytest.raises(ValueError, match=r"train\.parallel\.dp x cp is 2"):
        anchor_source(parallel)
