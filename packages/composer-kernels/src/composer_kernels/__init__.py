"""Low-precision formats (MXFP8, NVFP4), quantized MoE grouped GEMMs and varlen attention."""

from composer_kernels.attention import attention
from composer_kernels.grouped_mm import grouped_mm

__version__ = "0.1.0"

__all__ = ["__version__", "attention", "grouped_mm"]
