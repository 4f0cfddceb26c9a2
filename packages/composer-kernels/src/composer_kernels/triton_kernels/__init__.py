"""Triton quantizer kernels, used automatically for CUDA tensors when Triton is installed.

Set COMPOSER_KERNELS_NO_TRITON=1 to force the PyTorch reference path. The kernels are
tested bit-identical to the reference on the CPU under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import importlib.util
import os

import torch


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_triton(x: torch.Tensor) -> bool:
    """Whether the quantizers should run their Triton kernel on `x`."""
    if os.environ.get("COMPOSER_KERNELS_NO_TRITON") == "1":
        return False
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    return (x.is_cuda or interpret) and triton_available()


__all__ = ["triton_available", "use_triton"]
