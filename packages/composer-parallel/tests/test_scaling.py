"""The scaling estimate counts the model's real parameters and follows the layouts."""

from __future__ import annotations

import pytest

from composer_model import ComposerModel, preset
from composer_parallel.mesh import ParallelDims
from composer_parallel.scaling import estimate, markdown, parameter_counts


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("tiny", {}),
        ("small", {}),
        ("tiny", {"attention_bias": True}),
        ("tiny", {"attention_bias": True, "q_lora_rank": None}),
        ("tiny", {"attention": "mha", "qk_rope_head_dim": 32, "attention_bias": True}),
    ],
    ids=["tiny", "small", "tiny-mla-biases", "tiny-mla-no-q-latent", "tiny-mha"],
)
def test_parameter_counts_match_the_built_model(name: str, overrides: dict[str, object]) -> None:
    config = preset(name, num_nextn_predict_layers=0, **overrides)
    model = ComposerModel(config)
    dense, experts = parameter_counts(config)
    assert dense + experts == model.num_parameters()
    assert experts == sum(p.numel() for n, p in model.named_parameters() if ".experts.w_" in n)


def test_kimi_k2_layouts() -> None:
    config = preset("kimi-k2")
    cp2 = estimate(config, ParallelDims(dp=512, cp=2, ep=8), 65536)
    cp8 = estimate(config, ParallelDims(dp=256, cp=8, ep=8), 262144)
    assert 1.0e12 < cp2.dense_params + cp2.expert_params < 1.1e12  # Kimi K2 is ~1T parameters
    assert cp2.tokens_per_rank == cp8.tokens_per_rank == 32768
    assert cp8.state_gib == pytest.approx(cp2.state_gib / 2)  # twice the ranks, half the state
    assert cp8.kv_projected_gib == pytest.approx(8 * cp8.ring_block_gib)  # ring holds 1/cp
    assert cp8.cp_send_gib > cp2.cp_send_gib  # longer rows, more peers
    assert cp8.ep_send_gib == pytest.approx(cp2.ep_send_gib)  # same tokens per rank, same ep
    assert "EP=8" in markdown([("EP=8, CP=2", cp2)])
    with pytest.raises(ValueError, match="multiple of 2 x cp"):
        estimate(config, ParallelDims(dp=2, cp=2, ep=4), 65535)
