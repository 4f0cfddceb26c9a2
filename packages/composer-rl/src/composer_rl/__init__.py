"""The composition root of Composer: the stage-one training phases, the task suite, the agent
format and loop, evaluation, the four services, the plugin manager, the asynchronous RL
loop (`composer_rl.rl`) and the ``composer-rl`` command."""

__version__ = "0.1.0"

__all__ = ["__version__"]
