"""Low-precision formats (MXFP8, NVFP4), quantized MoE grouped GEMMs and varlen attention.

Everything runs on the CPU in plain PyTorch; Triton kernels (quantizers), torch's
native grouped GEMM and flash-attn's varlen kernel are used when present and the
tensors are on a GPU.
"""

from composer_kernels.attention import attention
from composer_kernels.formats import (
    E2M1,
    E4M3,
    E5M2,
    MXTensor,
    NVFP4Tensor,
    decode,
    decode_e8m0,
    encode,
    encode_e8m0,
    mx_dequantize,
    mx_fake_quantize,
    mx_quantize,
    nvfp4_dequantize,
    nvfp4_fake_quantize,
    nvfp4_quantize,
    pack_fp4,
    random_hadamard_transform,
    unpack_fp4,
)
from composer_kernels.gemm.dispatch import (
    dispatch_dequantize,
    dispatch_quantize,
    fake_quantize_for_dispatch,
)
from composer_kernels.gemm.mxfp8_linear import MXFP8Linear, mxfp8_linear
from composer_kernels.gemm.recipe import quantized_grouped_mm
from composer_kernels.grouped_mm import grouped_mm

__version__ = "0.1.0"

__all__ = [
    "E2M1",
    "E4M3",
    "E5M2",
    "MXFP8Linear",
    "MXTensor",
    "NVFP4Tensor",
    "__version__",
    "attention",
    "decode",
    "decode_e8m0",
    "dispatch_dequantize",
    "dispatch_quantize",
    "encode",
    "encode_e8m0",
    "fake_quantize_for_dispatch",
    "grouped_mm",
    "mx_dequantize",
    "mx_fake_quantize",
    "mx_quantize",
    "mxfp8_linear",
    "nvfp4_dequantize",
    "nvfp4_fake_quantize",
    "nvfp4_quantize",
    "pack_fp4",
    "quantized_grouped_mm",
    "random_hadamard_transform",
    "unpack_fp4",
]
