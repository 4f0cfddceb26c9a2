"""The composition root of Composer: the stage-one training phases, the task suite, the agent
format and loop, evaluation, the four services, the plugin manager and the ``composer-rl``
command. The asynchronous RL loop is not here yet; the training service's `train_step`
(with a custom loss) is where it will plug in."""

__version__ = "0.1.0"

__all__ = ["__version__"]
