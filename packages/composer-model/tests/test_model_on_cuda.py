"""The model on a GPU computes what it computes on the CPU (skipped without CUDA).

CI has no GPU; these run where one is lent. The CPU run's routing is replayed on the GPU
(router replay), so a near-tie between two experts cannot flip and turn a rounding
difference into a different network.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import micro_config

from composer_model import ComposerModel, ModelOutput

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _loss(
    model: ComposerModel, ids: torch.Tensor, replay: list[torch.Tensor] | None
) -> tuple[torch.Tensor, ModelOutput]:
    out = model(ids, return_routing=True, return_mtp=True, replay_indices=replay)
    logits = out.logits[0, :-1].float()
    loss = torch.nn.functional.cross_entropy(logits, ids[0, 1:])
    assert out.mtp_logits is not None
    return loss + out.mtp_logits[0][0, :-2].float().logsumexp(-1).mean() * 0.1, out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_and_gradients_on_cuda_match_the_cpu(dtype: torch.dtype) -> None:
    cpu_model = ComposerModel(micro_config()).train()
    cuda_model = copy.deepcopy(cpu_model).to(device="cuda", dtype=dtype)
    ids = torch.randint(0, 128, (1, 96), generator=torch.Generator().manual_seed(1))
    cpu_loss, cpu_out = _loss(cpu_model, ids, None)
    assert cpu_out.routing is not None
    replay = [r.cuda() for r in cpu_out.routing]
    cuda_loss, cuda_out = _loss(cuda_model, ids.cuda(), replay)
    assert int(cuda_out.replacements.sum()) == 0
    cpu_loss.backward()
    cuda_loss.backward()
    # float32 with TF32 off: accumulation order only. bfloat16: 8 bits of mantissa.
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    rel = float((cuda_out.logits.float().cpu() - cpu_out.logits).norm() / cpu_out.logits.norm())
    assert rel < tol, rel
    for (name, p_cpu), p_cuda in zip(
        cpu_model.named_parameters(), cuda_model.parameters(), strict=True
    ):
        if p_cpu.grad is None or p_cpu.grad.norm() == 0:
            continue
        assert p_cuda.grad is not None, name
        g = p_cuda.grad.float().cpu()
        rel = float((g - p_cpu.grad).norm() / p_cpu.grad.norm())
        assert rel < tol * 4, (name, rel)
