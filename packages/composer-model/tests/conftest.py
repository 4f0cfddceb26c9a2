"""Shared fixtures: micro configurations small enough for a 2-core CPU."""

from __future__ import annotations

import pytest
import torch

from composer_model import ModelConfig, preset


def micro_config(**overrides: object) -> ModelConfig:
    """Two dense layers, two MoE layers with group-limited routing, YaRN, one MTP module."""
    base = preset("tiny").model_dump()
    base.update(
        vocab_size=128,
        hidden_size=48,
        intermediate_size=96,
        moe_intermediate_size=24,
        num_hidden_layers=4,
        first_k_dense_replace=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=12,
        v_head_dim=12,
        n_routed_experts=8,
        n_group=4,
        topk_group=2,
        num_experts_per_tok=2,
        max_position_embeddings=512,
        rope_scaling={
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 128,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        num_nextn_predict_layers=1,
    )
    base.update(overrides)
    return ModelConfig.model_validate(base)


MHA = {"attention": "mha", "qk_rope_head_dim": 8, "v_head_dim": 12}
"""micro_config's overrides for plain attention (`layers/rotary_attention.py`) in its MLA's place."""


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
