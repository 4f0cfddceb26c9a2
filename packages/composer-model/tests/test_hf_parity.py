"""Parity with transformers' DeepseekV3ForCausalLM: same weights, same logits (fp32, 1e-4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from composer_model import ModelConfig, load_pretrained, save_pretrained

transformers = pytest.importorskip("transformers")


def _hf_model(routed_scaling: float = 2.5) -> torch.nn.Module:
    config = transformers.DeepseekV3Config(
        vocab_size=160,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=4,
        first_k_dense_replace=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=8,
        n_shared_experts=1,
        n_group=4,
        topk_group=2,
        num_experts_per_tok=3,
        routed_scaling_factor=routed_scaling,
        kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=12,
        max_position_embeddings=512,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        num_nextn_predict_layers=0,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        # HF initialises some weights to zero/one; randomise everything so parity means something.
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            else:
                param.normal_(0.0, 0.2 if "gate.weight" in name else 0.05)
        for layer in model.model.layers[2:]:
            layer.mlp.gate.e_score_correction_bias.uniform_(-0.05, 0.05)
    return model


def test_logits_match_transformers(tmp_path: Path) -> None:
    hf = _hf_model()
    hf.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path).eval()
    assert ours.config.first_k_dense_replace == 2 and ours.config.n_group == 4
    ids = torch.randint(0, 160, (2, 40))
    with torch.no_grad():
        expected = hf(ids).logits
        got = ours(ids).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_group_limit_changes_the_answer(tmp_path: Path) -> None:
    """Guards the parity test: without group-limited routing the logits would differ."""
    hf = _hf_model()
    hf.save_pretrained(tmp_path)
    data = ModelConfig.from_hf_dict(
        __import__("json").loads((tmp_path / "config.json").read_text())
    )
    ungrouped = load_pretrained(
        tmp_path, config=data.model_copy(update={"n_group": 1, "topk_group": 1})
    ).eval()
    ids = torch.randint(0, 160, (2, 40))
    with torch.no_grad():
        assert (ungrouped(ids).logits - hf(ids).logits).abs().max() > 1e-3


def test_our_checkpoint_loads_in_transformers(tmp_path: Path) -> None:
    hf = _hf_model()
    hf.save_pretrained(tmp_path / "hf")
    ours = load_pretrained(tmp_path / "hf").eval()
    save_pretrained(ours, tmp_path / "ours")
    reloaded = transformers.DeepseekV3ForCausalLM.from_pretrained(
        tmp_path / "ours", attn_implementation="eager"
    ).eval()
    ids = torch.randint(0, 160, (1, 33))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, hf(ids).logits, atol=1e-5, rtol=0)


def test_transformers_checkpoint_without_mtp_weights_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """transformers keeps num_nextn_predict_layers in config.json but saves no MTP weights."""
    hf = _hf_model()
    hf.config.num_nextn_predict_layers = 1
    hf.save_pretrained(tmp_path)
    saved = __import__("json").loads((tmp_path / "config.json").read_text())
    assert saved["num_nextn_predict_layers"] == 1
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as handle:
        assert not any(key.startswith("model.layers.4.") for key in handle.keys())  # noqa: SIM118
    with caplog.at_level("WARNING", logger="composer_model.checkpoint"):
        ours = load_pretrained(tmp_path).eval()
    assert [r for r in caplog.records if "MTP module(s) [0]" in r.getMessage()]
    assert len(ours.mtp_modules) == 1
    module = ours.mtp_modules[0]
    assert torch.equal(module.enorm.weight, torch.ones_like(module.enorm.weight))
    assert 0.0 < float(module.eh_proj.weight.detach().std()) < 0.1
    ids = torch.randint(0, 160, (2, 40))
    with torch.no_grad():
        out = ours(ids, return_mtp=True)
        torch.testing.assert_close(out.logits, hf(ids).logits, atol=1e-4, rtol=0)
    assert out.mtp_logits is not None and torch.isfinite(out.mtp_logits[0]).all()


def test_partly_present_mtp_module_is_refused(tmp_path: Path) -> None:
    """Only a wholly absent MTP module is initialised; a half-written one is an error."""
    from safetensors.torch import save_file

    from composer_model import ComposerModel, WeightsError
    from composer_model.checkpoint import to_hf_state_dict

    hf = _hf_model()
    hf.save_pretrained(tmp_path / "hf")
    config = load_pretrained(tmp_path / "hf").config.model_copy(
        update={"num_nextn_predict_layers": 1}
    )
    model = ComposerModel(config)
    save_pretrained(model, tmp_path / "ours")
    tensors = to_hf_state_dict(model)
    del tensors["model.layers.4.eh_proj.weight"]
    save_file(tensors, str(tmp_path / "ours" / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"mtp\.0\.eh_proj\.weight"):
        load_pretrained(tmp_path / "ours")


def test_our_checkpoint_with_mtp_loads_in_transformers(tmp_path: Path) -> None:
    """Our writer's MTP layer (stored as layer num_hidden_layers) does not disturb transformers."""
    hf = _hf_model()
    hf.save_pretrained(tmp_path / "hf")
    config = load_pretrained(tmp_path / "hf").config.model_copy(
        update={"num_nextn_predict_layers": 1}
    )
    from composer_model import ComposerModel

    torch.manual_seed(1)
    ours = ComposerModel(config).eval()
    save_pretrained(ours, tmp_path / "ours")
    reloaded = transformers.DeepseekV3ForCausalLM.from_pretrained(
        tmp_path / "ours", attn_implementation="eager"
    ).eval()
    ids = torch.randint(0, 160, (2, 29))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, ours(ids).logits, atol=1e-4, rtol=0)
