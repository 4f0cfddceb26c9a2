"""The Triton quantizers are bit-identical to the PyTorch reference.

They run on the CPU under TRITON_INTERPRET=1, in a subprocess so that the interpreter
setting (read when kernels are defined) cannot leak into or depend on other tests.
Shapes are small: the interpreter executes every program in Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")
pytest.importorskip("numpy")  # the interpreter needs it

SCRIPT = textwrap.dedent(
    """
    import json, math, warnings
    import torch
    warnings.filterwarnings("ignore")
    from composer_kernels.formats import mx_quantize, nvfp4_quantize
    from composer_kernels.triton_kernels._nvfp4 import (
        nvfp4_quantize_per_tensor,
        nvfp4_quantize_per_token,
    )

    def edge_rows(x):
        x[0, 3] = math.nan
        x[1, 40 % x.shape[1]] = math.inf
        x[2] = 0.0
        x[3, :16] = 1e-42  # float32 subnormals
        x[4, 16:32] = -1e-30
        return x

    gen = torch.Generator().manual_seed(0)
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        base = torch.randn(9, 128, generator=gen) * torch.logspace(-5, 5, 128)
        x = edge_rows(base).to(dtype)
        for elem in ("e4m3", "e5m2"):
            for rule in ("floor", "rceil"):
                for dim in (-1, 0) if dtype == torch.float32 else (-1,):
                    xs = x if dim == -1 else torch.randn(64, 5, generator=gen).to(dtype)
                    t = mx_quantize(xs, elem, scale_rule=rule, dim=dim, backend="triton")
                    r = mx_quantize(xs, elem, scale_rule=rule, dim=dim, backend="torch")
                    key = f"mx-{elem}-{rule}-dim{dim}-{str(dtype)[6:]}"
                    results[key] = torch.equal(t.scales, r.scales) and torch.equal(
                        t.data.view(torch.uint8), r.data.view(torch.uint8)
                    )
        for shape, step in (((9, 96), 2), ((5, 32), 16), ((2, 5, 48), 1)):
            x = torch.randn(*shape, generator=gen) * torch.logspace(-3, 3, shape[-1])
            if len(shape) == 2 and shape[0] >= 5:
                x = edge_rows(x)
            x = x.to(dtype)
            data, scales, g = nvfp4_quantize_per_token(x, blocks_per_step=step)
            r = nvfp4_quantize(x, backend="torch")
            key = f"nvfp4-{'x'.join(map(str, shape))}-step{step}-{str(dtype)[6:]}"
            results[key] = (
                torch.equal(data, r.data)
                and torch.equal(scales, r.block_scales.view(torch.uint8))
                and torch.equal(g.view(torch.int32), r.global_scale.view(torch.int32))
            )
            data, scales, g = nvfp4_quantize_per_tensor(x, blocks_per_step=step)
            r = nvfp4_quantize(x, scale_mode="per_tensor", backend="torch")
            results[key.replace("nvfp4", "nvfp4-per-tensor")] = (
                torch.equal(data, r.data)
                and torch.equal(scales, r.block_scales.view(torch.uint8))
                and torch.equal(g.view(torch.int32), r.global_scale.view(torch.int32))
            )
        auto = nvfp4_quantize(x, backend="triton")
        r = nvfp4_quantize(x, backend="torch")
        results[f"nvfp4-public-{str(dtype)[6:]}"] = torch.equal(auto.data, r.data)
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def interpreter_results() -> dict[str, bool]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def test_every_case_ran(interpreter_results: dict[str, bool]) -> None:
    # MX: 8 float32 (2 formats x 2 rules x 2 dims) + 4 bfloat16; NVFP4: 3 shapes x 2 dtypes
    # x 2 scale modes + 2 through the public function.
    assert len(interpreter_results) == 12 + 12 + 2


@pytest.mark.parametrize("kind", ["mx", "nvfp4"])
def test_triton_quantizers_are_bit_identical_to_the_reference(
    interpreter_results: dict[str, bool], kind: str
) -> None:
    cases = {k: v for k, v in interpreter_results.items() if k.startswith(kind)}
    assert cases
    assert all(cases.values()), {k: v for k, v in cases.items() if not v}


def test_choosing_triton_for_unsupported_options_is_a_clear_error() -> None:
    import torch

    from composer_kernels.formats import nvfp4_quantize

    with pytest.raises(ValueError, match="Triton kernel does not support"):
        nvfp4_quantize(
            torch.zeros(16, 16), scale_mode="per_tensor", block_2d=True, backend="triton"
        )


def test_auto_stays_on_pytorch_for_cpu_tensors_and_triton_on_cpu_needs_the_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from composer_kernels.formats import mx_quantize
    from composer_kernels.triton_kernels import use_triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not use_triton(torch.zeros(4))
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match="CUDA tensor"):
        mx_quantize(torch.zeros(2, 32), backend="triton")
