"""The Kimi-K2-shaped MoE policy: MLA, MoE with router replay, multi-token prediction, tokenizer and an inference engine."""

from composer_model.checkpoint import CheckpointError, load_pretrained, save_pretrained
from composer_model.config import PRESETS, ModelConfig, YarnScaling, preset
from composer_model.engine import GenerationResult, InferenceEngine, SamplingParams
from composer_model.losses import LossOutput, compute_loss, document_targets
from composer_model.model import ComposerModel, ModelOutput
from composer_model.tokenizer import SPECIAL_TOKENS, ComposerTokenizer, train_tokenizer

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "SPECIAL_TOKENS",
    "CheckpointError",
    "ComposerModel",
    "ComposerTokenizer",
    "GenerationResult",
    "InferenceEngine",
    "LossOutput",
    "ModelConfig",
    "ModelOutput",
    "SamplingParams",
    "YarnScaling",
    "__version__",
    "compute_loss",
    "document_targets",
    "load_pretrained",
    "preset",
    "save_pretrained",
    "train_tokenizer",
]
