"""Capture and restore every random number generator a training step touches."""

from __future__ import annotations

import random
from typing import Any, cast

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and (if present) CUDA generator states, torch-loadable safely."""
    np_state = cast(tuple[Any, ...], np.random.get_state(legacy=True))
    py_state = random.getstate()
    state: dict[str, Any] = {
        "python": [py_state[0], list(py_state[1]), py_state[2]],
        "numpy": {
            "name": str(np_state[0]),
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (
            n["name"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
