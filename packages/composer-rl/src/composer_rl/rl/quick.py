"""A random tiny policy and RL settings sized for it: what `--quick` modes and tests run.

A quick run needs a stage-one-shaped checkpoint (weights, MTP module, a tokenizer that knows
the agent format) in seconds, not the half hour stage one takes. Its weights are random, so
it shows that the pipeline runs and what it costs, never that anything learned.
"""

from __future__ import annotations

from pathlib import Path

import torch

from composer_model import ComposerModel, preset, save_pretrained, train_tokenizer
from composer_rl.agent.oracle import play_oracle
from composer_rl.tasks import BUILTIN_TEMPLATES, Split


def random_checkpoint(directory: Path, seed: int = 0) -> Path:
    """A two-layer `tiny` model with random weights and a 400-token tokenizer trained on three
    oracle demonstrations, saved as a checkpoint directory; returns `directory`."""
    tasks = [t for _, t in zip(range(3), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)]
    texts = [play_oracle(t, grade=False).transcript.text for t in tasks]
    tokenizer = train_tokenizer(texts * 4, vocab_size=400)
    torch.manual_seed(seed)
    model = ComposerModel(preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=2))
    save_pretrained(model, directory)
    tokenizer.save(directory / "tokenizer.json")
    return directory


QUICK_RL_SETTINGS: dict[str, object] = {
    "tasks.per_template": 2,
    "rollout.max_turns": 2,
    "rollout.max_new_tokens": 32,
    "rollout.max_seq_len": 512,
    "loop.drop_constant_groups": False,
}
"""RL settings small enough for a quick run on `random_checkpoint`."""

__all__ = ["QUICK_RL_SETTINGS", "random_checkpoint"]
