"""The GPU paths agree with the CPU references they stand in for (skipped without CUDA).

CI has no GPU, so these run where one is lent (the kernels README, "Tests", says how).
Each compares a CUDA path with the reference the CPU tests already pin down: the Triton
quantizers bit for bit, torch's fused grouped GEMM, attention's CUDA route and the
quantized MoE recipe within stated tolerances.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_attention import CU
from test_attention import _reference as attention_reference
from test_grouped_mm import _reference as grouped_reference

from composer_kernels import attention, grouped_mm, quantized_grouped_mm
from composer_kernels.grouped_mm import native_grouped_mm_applies

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CASES = Path(__file__).with_name("_triton_cases.py")


def test_compiled_triton_quantizers_are_bit_identical_to_the_cpu_reference() -> None:
    pytest.importorskip("triton")
    proc = subprocess.run(
        [sys.executable, str(CASES), "cuda", "large"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 12 + 12 + 2
    assert all(results.values()), {k: v for k, v in results.items() if not v}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_mm_on_cuda_matches_the_reference_with_gradients(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    ends = [300, 300, 700, 1024]  # expert 1 gets no tokens
    x = torch.randn(1024, 256, generator=gen).to(dtype)
    w = (torch.randn(4, 256, 128, generator=gen) / 16).to(dtype)
    xc, wc = x.cuda().requires_grad_(), w.cuda().requires_grad_()
    out = grouped_mm(xc, wc, torch.tensor(ends, device="cuda"))
    tol = 2e-3 if dtype == torch.float32 else 3e-2  # float32 matmuls may run in TF32
    ref = grouped_reference(x, w, ends)
    torch.testing.assert_close(out.double().cpu(), ref, atol=tol, rtol=tol)
    g = torch.randn(1024, 128, generator=gen).to(dtype)
    out.backward(g.cuda())
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    grouped_reference(xr, wr, ends).backward(g.double())
    assert xc.grad is not None and wc.grad is not None
    torch.testing.assert_close(xc.grad.double().cpu(), xr.grad, atol=tol * 10, rtol=tol)
    torch.testing.assert_close(wc.grad.double().cpu(), wr.grad, atol=tol * 10, rtol=tol)
    assert wc.grad[1].abs().sum() == 0


def test_bf16_grouped_mm_on_a_hopper_gpu_takes_the_fused_gemm() -> None:
    x = torch.zeros(8, 16, dtype=torch.bfloat16, device="cuda")
    w = torch.zeros(2, 16, 16, dtype=torch.bfloat16, device="cuda")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("torch's fused grouped GEMM needs compute capability 9.0")
    assert native_grouped_mm_applies(x, w)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_on_cuda_matches_the_reference(causal: bool, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(CU[-1], 4, 16, generator=gen).to(dtype)
    k = torch.randn(CU[-1], 2, 16, generator=gen).to(dtype)
    v = torch.randn(CU[-1], 2, 8, generator=gen).to(dtype)
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    cu = torch.tensor(CU, dtype=torch.int32, device="cuda")
    out = attention(qc, kc, vc, cu_seqlens=cu, causal=causal, softmax_scale=0.3)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, _ = attention_reference(qr, kr, vr, CU, causal, 0.3)
    tol = 2e-3 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.double().cpu(), ref, atol=tol, rtol=tol)
    g = torch.randn(out.shape, generator=gen)
    ours = torch.autograd.grad(out, (qc, kc, vc), g.to(dtype).cuda())
    theirs = torch.autograd.grad(ref, (qr, kr, vr), g.double())
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.double().cpu(), b, atol=tol * 5, rtol=tol * 5)


def test_quantized_recipe_on_cuda_matches_its_cpu_emulation() -> None:
    """The quantizers agree bit for bit (above), so what is left is matmul accumulation
    order: float32 with TF32 off, relative Frobenius error below 1e-5."""
    gen = torch.Generator().manual_seed(3)
    ends = [64, 64, 200, 256]
    x = torch.randn(256, 128, generator=gen)
    w = torch.randn(4, 128, 96, generator=gen) / 128**0.5
    dy = torch.randn(256, 96, generator=gen)
    offsets = torch.tensor(ends)
    results = []
    for device in ("cpu", "cuda"):
        xs = x.detach().clone().to(device).requires_grad_()
        ws = w.detach().clone().to(device).requires_grad_()
        out = quantized_grouped_mm(xs, ws, offsets.to(device))
        out.backward(dy.to(device))
        assert xs.grad is not None and ws.grad is not None
        results.append([t.detach().cpu() for t in (out, xs.grad, ws.grad)])
    assert not torch.backends.cuda.matmul.allow_tf32, "TF32 would make this comparison loose"
    for cpu, cuda in zip(*results, strict=True):
        assert float((cuda - cpu).norm() / cpu.norm()) < 1e-5
