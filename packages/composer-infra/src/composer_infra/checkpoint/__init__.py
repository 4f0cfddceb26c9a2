"""Policy-aware checkpoints: step (trainer), group (finished work), rollout (in flight)."""

from composer_infra.checkpoint.atomic import atomic_directory, atomic_write_bytes, write_once_bytes
from composer_infra.checkpoint.groups import EpisodeRecord, FinishedGroup, GroupExists, GroupStore
from composer_infra.checkpoint.rng import rng_state, set_rng_state
from composer_infra.checkpoint.rollout import RolloutCheckpoint, RolloutStore
from composer_infra.checkpoint.sampler import SingleEpochSampler
from composer_infra.checkpoint.step import CheckpointError, StepCheckpointer, StepState

__all__ = [
    "CheckpointError",
    "EpisodeRecord",
    "FinishedGroup",
    "GroupExists",
    "GroupStore",
    "RolloutCheckpoint",
    "RolloutStore",
    "SingleEpochSampler",
    "StepCheckpointer",
    "StepState",
    "atomic_directory",
    "atomic_write_bytes",
    "rng_state",
    "set_rng_state",
    "write_once_bytes",
]
