"""The Kimi-K2-shaped MoE policy: MLA, MoE with router replay, multi-token prediction, tokenizer and an inference engine."""

__version__ = "0.1.0"

__all__ = ["__version__"]
