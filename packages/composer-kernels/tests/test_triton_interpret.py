"""The Triton quantizers are bit-identical to the PyTorch reference.

They run on the CPU under TRITON_INTERPRET=1, in a subprocess so that the interpreter
setting (read when kernels are defined) cannot leak into or depend on other tests.
Shapes are small: the interpreter executes every program in Python. The cases live in
`_triton_cases.py`, which `test_cuda.py` runs with compiled kernels on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("numpy")  # the interpreter needs it

CASES = Path(__file__).with_name("_triton_cases.py")


@pytest.fixture(scope="module")
def interpreter_results() -> dict[str, bool]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(CASES), "cpu", "small"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
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
