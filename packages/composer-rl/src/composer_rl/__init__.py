"""The composition root of Composer: training stages, the task suite, evaluation, the RL loop and the composer-rl command."""

__version__ = "0.1.0"

__all__ = ["__version__"]
