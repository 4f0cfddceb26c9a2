"""Inference: latent KV cache, sampling, continuous batching, in-flight weight updates, MTP drafts."""

from composer_model.engine.cache import LatentKVCache
from composer_model.engine.engine import EngineStats, GenerationResult, InferenceEngine
from composer_model.engine.sampling import SamplingParams, sampling_logprobs

__all__ = [
    "EngineStats",
    "GenerationResult",
    "InferenceEngine",
    "LatentKVCache",
    "SamplingParams",
    "sampling_logprobs",
]
