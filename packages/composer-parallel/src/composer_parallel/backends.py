"""Which expert-parallel communication backend this machine can use.

DeepEP is not on PyPI (it is built from source against NVSHMEM on GPU machines), so it is
never a declared dependency: it is detected at run time, and everything else falls back
to `torch.distributed`'s all-to-all, which works everywhere (gloo on CPU).
"""

from __future__ import annotations

import importlib.util
from typing import Literal

ExpertDispatchBackend = Literal["deep_ep", "all_to_all"]


def deep_ep_available() -> bool:
    """True when the `deep_ep` package is importable in this environment."""
    return importlib.util.find_spec("deep_ep") is not None


def expert_dispatch_backend(prefer: ExpertDispatchBackend | None = None) -> ExpertDispatchBackend:
    """The backend for token dispatch/combine: DeepEP when installed, else all-to-all.

    `prefer="deep_ep"` on a machine without it is an error rather than a silent fallback,
    so a GPU job that expects DeepEP does not quietly run at all-to-all speed.
    """
    if prefer == "all_to_all":
        return "all_to_all"
    if deep_ep_available():
        return "deep_ep"
    if prefer == "deep_ep":
        raise RuntimeError(
            "expert dispatch backend 'deep_ep' was asked for but the deep_ep package is not "
            "installed; build DeepEP from its source on the GPU machine (see the workspace "
            "README, 'GPU extras') or ask for 'all_to_all'"
        )
    return "all_to_all"
