"""The services as plain classes (no Ray): publish -> subscribe -> version stamps, bit for bit."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import pytest
import torch
from _services_support import VOCAB, micro_config, token_batch

from composer_model import OptimConfig, save_pretrained
from composer_rl.rl.services import (
    EvaluationService,
    InferenceService,
    TrainingConfig,
    TrainingService,
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_train_publish_subscribe_and_version_stamps(tmp_path: Path) -> None:
    url = (tmp_path / "weights").as_uri()
    config = micro_config()
    trainer = TrainingService(
        config,
        url,
        tmp_path / "ckpt",
        TrainingConfig(
            optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=0), checkpoint_every=2, seed=1
        ),
    )
    # Inference starts from different random weights (seed 0); sync must replace them.
    inference = InferenceService(config, url)
    evaluation = EvaluationService(config, url)
    try:
        assert not _same_weights(trainer.model, inference.engine.model)
        assert inference.sync() == 0 and _same_weights(trainer.model, inference.engine.model)

        before = inference.generate([[5, 6, 7]], max_new_tokens=4, seed=3)[0]
        assert before.versions == [0] * len(before.token_ids)
        held_out = token_batch(seed=99, rows=2)
        eval0 = evaluation.evaluate(held_out)
        assert eval0["version"] == 0 and math.isfinite(eval0["loss"])

        batch = token_batch(seed=0)
        losses = [trainer.train_step(batch).stats.loss for _ in range(3)]
        assert trainer.flush() == 3 and trainer.version() == 3
        assert losses[-1] < losses[0]  # it trains

        assert inference.sync() == 3
        assert _same_weights(trainer.model, inference.engine.model)  # bit-identical
        after = inference.generate(
            [[5, 6, 7], [9, 9]], max_new_tokens=5, seed=3, return_routing=True
        )
        for result in after:
            assert result.versions == [3] * len(result.token_ids)
            assert len(result.logprobs) == len(result.token_ids)
            assert all(lp <= 0.0 and math.isfinite(lp) for lp in result.logprobs)
            assert all(0 <= t < VOCAB for t in result.token_ids)
            assert result.routing is not None
            assert result.routing.shape[0] == len(result.prompt_ids) + len(result.token_ids)
        eval3 = evaluation.evaluate(held_out)
        assert eval3["version"] == 3 and _same_weights(trainer.model, evaluation.model)
        assert eval3["loss"] != eval0["loss"]
        assert eval3["tokens"] == sum(len(s) - 1 for s in held_out)

        # A checkpoint every 2 steps: step 2 is on disk with its policy version.
        latest = trainer.checkpointer.latest() if trainer.checkpointer else None
        assert latest is not None
        assert trainer.checkpointer is not None
        assert trainer.checkpointer.read_state(latest).policy_version == 2
    finally:
        trainer.close()
        inference.close()
        evaluation.close()


def test_bf16_publishing_serves_rounded_weights_and_the_trainer_keeps_float32(
    tmp_path: Path,
) -> None:
    """`publish_dtype='bfloat16'` (the RL setting `train.publish_dtype`): the engine decodes
    with the trainer's weights rounded to bf16, its own parameters stay float32, and the
    trainer's are untouched, so the two differ by exactly that rounding."""
    url = (tmp_path / "weights").as_uri()
    config = micro_config()
    trainer = TrainingService(
        config,
        url,
        None,
        TrainingConfig(
            optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=0),
            publish_dtype="bfloat16",
            seed=1,
        ),
    )
    inference = InferenceService(config, url)
    try:
        trainer.train_step(token_batch(seed=0))
        assert trainer.flush() == 1 and inference.sync() == 1
        mine, served = trainer.model.state_dict(), inference.engine.model.state_dict()
        floats = [k for k, v in mine.items() if v.is_floating_point()]
        assert floats and all(mine[k].dtype == torch.float32 for k in floats)
        assert all(served[k].dtype == torch.float32 for k in floats)
        for key in floats:
            assert torch.equal(served[key], mine[key].to(torch.bfloat16).float()), key
        assert any(not torch.equal(served[k], mine[k]) for k in floats)  # rounding happened
    finally:
        trainer.close()
        inference.close()


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
    reason="inductor needs a C++ compiler to capture the decode step on the CPU",
)
@pytest.mark.slow  # compiles the decode step (about a minute on 2 cores)
def test_a_captured_engine_serves_each_published_version(tmp_path: Path) -> None:
    """`compile_decode=True` through the store: the captured graph reads every new version."""
    url = (tmp_path / "weights").as_uri()
    config = micro_config()
    trainer = TrainingService(
        config,
        url,
        tmp_path / "ckpt",
        TrainingConfig(optim=OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=0)),
    )
    eager = InferenceService(config, url)
    captured = InferenceService(config, url, compile_decode=True)
    prompts = [[5, 6, 7], [9, 9]]
    try:
        outputs = []
        for expected_version in (0, 2):
            pair = []
            for service in (eager, captured):
                assert service.sync() == expected_version
                pair.append(service.generate(prompts, max_new_tokens=6, seed=3))
            for a, b in zip(*pair, strict=True):
                assert b.token_ids == a.token_ids
                assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
                assert b.versions == a.versions == [expected_version] * len(a.token_ids)
            outputs.append(pair[1])
            for seed in range(2):
                trainer.train_step(token_batch(seed=seed))
            trainer.flush()
        assert captured.engine.captured is not None and captured.engine.captured.active
        assert [r.logprobs for r in outputs[0]] != [r.logprobs for r in outputs[1]]
    finally:
        trainer.close()
        eager.close()
        captured.close()


def test_restarted_trainer_resumes_from_its_checkpoint_under_a_fresh_version(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "weights").as_uri()
    config = micro_config()
    cfg = TrainingConfig(checkpoint_every=2)
    first = TrainingService(config, url, tmp_path / "ckpt", cfg)
    first.train_step(token_batch(seed=0))
    first.train_step(token_batch(seed=1))  # checkpoint: step 2, version 2
    at_checkpoint = {k: v.clone() for k, v in first.model.state_dict().items()}
    first.train_step(token_batch(seed=2), wait=True)  # version 3 published, not checkpointed
    first.close()  # "crash" after step 3

    inference = InferenceService(config, url)
    assert inference.sync() == 3  # a subscriber already holds version 3
    second = TrainingService(config, url, tmp_path / "ckpt", cfg)
    try:
        assert second.step == 2  # resumed from the checkpoint ...
        assert all(torch.equal(at_checkpoint[k], v) for k, v in second.model.state_dict().items())
        assert second.version() == 4  # ... under a number the store never used
        assert inference.sync() == 4
        assert _same_weights(second.model, inference.engine.model)
        assert second.train_step(token_batch(seed=2), wait=True).version == 5
        assert inference.sync() == 5 and _same_weights(second.model, inference.engine.model)
    finally:
        second.close()
        inference.close()


def test_inference_follows_new_versions_in_the_background(tmp_path: Path) -> None:
    url = (tmp_path / "weights").as_uri()
    trainer = TrainingService(micro_config(), url)
    inference = InferenceService(micro_config(), url, follow_interval_s=0.05)
    try:
        trainer.train_step(token_batch(seed=0), wait=True)
        deadline = time.monotonic() + 60
        while inference.version() != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert inference.version() == 1
        assert _same_weights(trainer.model, inference.engine.model)
        result = inference.generate([[1, 2]], max_new_tokens=3, seed=0)[0]
        assert result.versions == [1] * len(result.token_ids)
    finally:
        inference.close()
        trainer.close()


def test_services_load_a_pretrained_directory(tmp_path: Path) -> None:
    from composer_model import ComposerModel

    torch.manual_seed(7)
    model = ComposerModel(micro_config())
    save_pretrained(model, tmp_path / "pretrained")
    trainer = TrainingService(tmp_path / "pretrained", (tmp_path / "w").as_uri())
    try:
        assert _same_weights(trainer.model, model)
    finally:
        trainer.close()


def test_bad_input_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    url = (tmp_path / "weights").as_uri()
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        TrainingService(tmp_path / "missing", url)
    trainer = TrainingService(micro_config(), url)
    evaluation = EvaluationService(micro_config(), (tmp_path / "empty").as_uri())
    try:
        with pytest.raises(ValueError, match="at least 2"):
            trainer.train_step([[1]])
        with pytest.raises(ValueError, match=r"outside \[0, 128\)"):
            trainer.train_step([[1, 500]])
        with pytest.raises(ValueError, match="empty"):
            trainer.train_step([])
        assert trainer.version() == 0  # nothing was stepped
        with pytest.raises(RuntimeError, match="no policy version"):
            evaluation.evaluate([[1, 2, 3]])
    finally:
        trainer.close()
        evaluation.close()
