"""Reward and behaviour-monitor plugin hooks for Composer, with the built-in rewards. Light: no torch."""

__version__ = "0.1.0"

__all__ = ["__version__"]
