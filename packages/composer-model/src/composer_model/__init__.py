"""The Kimi-K2-shaped MoE policy: MLA, MoE with router replay, multi-token prediction, tokenizer and an inference engine."""

from composer_model.checkpoint import WeightsError, load_pretrained, save_pretrained
from composer_model.config import PRESETS, ModelConfig, YarnScaling, preset
from composer_model.engine import GenerationResult, InferenceEngine, SamplingParams
from composer_model.losses import (
    Labels,
    LossOutput,
    compute_loss,
    document_targets,
    target_counts,
    target_ids,
)
from composer_model.model import ComposerModel, ModelOutput
from composer_model.tokenizer import SPECIAL_TOKENS, ComposerTokenizer, train_tokenizer
from composer_model.training import (
    OptimConfig,
    PackedRow,
    ParallelHooks,
    RowLayout,
    StepObjective,
    StepStats,
    WholeRow,
    build_optimizer,
    forward_row,
    lm_forward_loss,
    lr_at,
    set_threads,
    train_step,
)

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "SPECIAL_TOKENS",
    "ComposerModel",
    "ComposerTokenizer",
    "GenerationResult",
    "InferenceEngine",
    "Labels",
    "LossOutput",
    "ModelConfig",
    "ModelOutput",
    "OptimConfig",
    "PackedRow",
    "ParallelHooks",
    "RowLayout",
    "SamplingParams",
    "StepObjective",
    "StepStats",
    "WeightsError",
    "WholeRow",
    "YarnScaling",
    "__version__",
    "build_optimizer",
    "compute_loss",
    "document_targets",
    "forward_row",
    "lm_forward_loss",
    "load_pretrained",
    "lr_at",
    "preset",
    "save_pretrained",
    "set_threads",
    "target_counts",
    "target_ids",
    "train_step",
    "train_tokenizer",
]
