"""Sandboxed coding environments, the delta-compressed weight store, policy-aware checkpoints and the Ray service runtime."""

__version__ = "0.1.0"

__all__ = ["__version__"]
