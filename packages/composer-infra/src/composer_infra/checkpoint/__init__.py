"""Policy-aware checkpoints: step (trainer) and group (finished work)."""

# Submodules are imported on first use: a caller that only needs the light parts (group
# records, atomic writes) does not pay for importing torch.
from typing import TYPE_CHECKING

from composer_infra._lazy import lazy_getattr

if TYPE_CHECKING:
    from composer_infra.checkpoint.atomic import (
        atomic_directory,
        atomic_write_bytes,
        write_once_bytes,
    )
    from composer_infra.checkpoint.groups import (
        FinishedGroup,
        GroupExists,
        GroupFileError,
        GroupStore,
        Trajectory,
    )
    from composer_infra.checkpoint.rng import rng_state, set_rng_state
    from composer_infra.checkpoint.step import CheckpointError, StepCheckpointer, StepState

_EXPORTS = {
    "composer_infra.checkpoint.atomic": (
        "atomic_directory",
        "atomic_write_bytes",
        "write_once_bytes",
    ),
    "composer_infra.checkpoint.groups": (
        "FinishedGroup",
        "GroupExists",
        "GroupFileError",
        "GroupStore",
        "Trajectory",
    ),
    "composer_infra.checkpoint.rng": ("rng_state", "set_rng_state"),
    "composer_infra.checkpoint.step": ("CheckpointError", "StepCheckpointer", "StepState"),
}

__getattr__ = lazy_getattr(__name__, _EXPORTS)


__all__ = [
    "CheckpointError",
    "FinishedGroup",
    "GroupExists",
    "GroupFileError",
    "GroupStore",
    "StepCheckpointer",
    "StepState",
    "Trajectory",
    "atomic_directory",
    "atomic_write_bytes",
    "rng_state",
    "set_rng_state",
    "write_once_bytes",
]
