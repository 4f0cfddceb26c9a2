"""Configuration validation, HF config round trip and the parameter counts of the full presets."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from composer_model import ComposerModel, ModelConfig, preset


@pytest.mark.parametrize(
    ("name", "total", "active", "tolerance"),
    [
        # DeepSeek-V3 technical report: 671B total, 37B activated per token (main model, no MTP).
        ("deepseek-v3", 671e9, 37e9, 0.02),
        # Kimi K2 report: 1.04T total, 32B activated.
        ("kimi-k2", 1.04e12, 32e9, 0.04),
    ],
)
def test_full_presets_match_published_parameter_counts(
    name: str, total: float, active: float, tolerance: float
) -> None:
    with torch.device("meta"):
        model = ComposerModel(preset(name))
    assert abs(model.num_parameters() - total) / total < tolerance
    assert abs(model.num_parameters(active=True) - active) / active < tolerance


def test_tiny_preset_is_cpu_sized() -> None:
    model = ComposerModel(preset("tiny"))
    assert 2e6 <= model.num_parameters() <= 5e6
    assert model.config.vocab_size == 4096 and model.config.first_k_dense_replace == 1


def test_unknown_preset_names_the_choices() -> None:
    with pytest.raises(ValueError, match="tiny"):
        preset("huge")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"n_routed_experts": 10, "n_group": 4}, "divisible by n_group"),
        ({"topk_group": 8, "n_group": 4}, "cannot exceed n_group"),
        (
            {"num_experts_per_tok": 5, "topk_group": 1, "n_group": 2},
            "exceeds the experts reachable",
        ),
        ({"qk_rope_head_dim": 7}, "must be even"),
        ({"first_k_dense_replace": 9}, "exceeds num_hidden_layers"),
    ],
)
def test_bad_shapes_are_rejected_with_a_reason(override: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        preset("tiny", **override)


def test_hf_config_round_trip_and_rope_parameters_form() -> None:
    config = preset("deepseek-v3")
    data = config.to_hf_dict()
    assert data["model_type"] == "deepseek_v3" and data["rope_scaling"]["type"] == "yarn"
    assert ModelConfig.from_hf_dict(data) == config
    # transformers 5 writes `rope_parameters` instead of rope_theta/rope_scaling.
    newer = {k: v for k, v in data.items() if k not in {"rope_scaling", "rope_theta"}}
    newer["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, **data["rope_scaling"]}
    newer["rope_parameters"].pop("type")
    assert ModelConfig.from_hf_dict(newer).rope_scaling == config.rope_scaling


def test_foreign_model_type_is_refused() -> None:
    with pytest.raises(ValueError, match="deepseek_v3"):
        ModelConfig.from_hf_dict({**preset("tiny").to_hf_dict(), "model_type": "llama"})


# deepseek-ai/DeepSeek-V3 config.json as published (auto_map and quantization fields included).
DEEPSEEK_V3_CONFIG_JSON = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "pretraining_tp": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


def test_published_deepseek_v3_config_reads_as_the_preset() -> None:
    assert ModelConfig.from_hf_dict(DEEPSEEK_V3_CONFIG_JSON) == preset("deepseek-v3")
