"""A random tiny policy shaped like stage one's output: what `--quick` modes and tests start from.

A quick run needs a stage-one-shaped checkpoint (weights, MTP module, a tokenizer that knows
the agent format) in seconds, not the half hour stage one takes. Its weights are random, so
it shows that a pipeline runs and what it costs, never that anything learned. It is also the
random baseline's stand-in when no reference checkpoint is given
(`composer_rl.eval.baseline_checkpoints`); `composer_rl.rl.quick` has the RL settings sized
for it.
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


__all__ = ["random_checkpoint"]
