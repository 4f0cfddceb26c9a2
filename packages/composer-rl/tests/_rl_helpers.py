"""A tiny 'stage-one checkpoint' (random weights, a tokenizer trained on demonstrations) for RL tests."""

from __future__ import annotations

from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.stages.quick import random_checkpoint as tiny_checkpoint

__all__ = ["QUICK_RL_SETTINGS", "tiny_checkpoint"]
