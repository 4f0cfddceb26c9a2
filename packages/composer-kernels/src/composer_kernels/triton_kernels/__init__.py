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
    """Whether `backend="auto"` runs the Triton kernel on `x`: CUDA tensors only."""
    if os.environ.get("COMPOSER_KERNELS_NO_TRITON") == "1":
        return False
    return x.is_cuda and triton_available()


def check_triton_runs_on(x: torch.Tensor) -> None:
    """For `backend="triton"`: a CUDA tensor, or any tensor under TRITON_INTERPRET=1."""
    if not triton_available():
        raise ValueError("backend='triton' needs Triton installed; use backend='torch'")
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            "backend='triton' needs a CUDA tensor (or TRITON_INTERPRET=1 to run the kernel "
            "in Triton's interpreter on the CPU); use backend='auto' or 'torch'"
        )


__all__ = ["check_triton_runs_on", "triton_available", "use_triton"]
