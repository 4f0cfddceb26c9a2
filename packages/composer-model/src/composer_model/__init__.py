"""The Kimi-K2-shaped MoE policy: MLA, MoE with router replay, multi-token prediction, tokenizer and an inference engine."""

from composer_model.checkpoint import CheckpointError, load_pretrained, save_pretrained
from composer_model.config import PRESETS, ModelConfig, YarnScaling, preset
from composer_model.model import ComposerModel, ModelOutput

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "CheckpointError",
    "ComposerModel",
    "ModelConfig",
    "ModelOutput",
    "YarnScaling",
    "__version__",
    "load_pretrained",
    "preset",
    "save_pretrained",
]
