"""Our own save/load round trip (MTP included), sharding, FP8 checkpoints and failure paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import micro_config
from safetensors import safe_open
from safetensors.torch import save_file

from composer_model import ComposerModel, WeightsError, load_pretrained, save_pretrained
from composer_model.checkpoint import to_hf_state_dict


def _trained_bias_model() -> ComposerModel:
    model = ComposerModel(micro_config())
    for layer in model.moe_layers:
        layer.gate.e_score_correction_bias.uniform_(-0.1, 0.1)
    return model


def test_round_trip_keeps_every_tensor_including_mtp(tmp_path: Path) -> None:
    model = _trained_bias_model()
    save_pretrained(model, tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.layers.4.eh_proj.weight" in keys  # MTP stored as layer num_hidden_layers
    assert (
        "model.layers.4.shared_head.head.weight" in keys
        and "model.layers.4.embed_tokens.weight" in keys
    )
    assert "model.layers.3.mlp.experts.7.down_proj.weight" in keys
    loaded = load_pretrained(tmp_path)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad():
        a, b = model(ids, return_mtp=True), loaded(ids, return_mtp=True)
    assert a.mtp_logits is not None and b.mtp_logits is not None
    assert torch.equal(a.logits, b.logits) and torch.equal(a.mtp_logits[0], b.mtp_logits[0])
    assert (
        json.loads((tmp_path / "config.json").read_text())["composer"]["mtp_target"]
        == "self_distill"
    )


def test_tied_embeddings_round_trip_and_stay_tied(tmp_path: Path) -> None:
    model = ComposerModel(micro_config(tie_word_embeddings=True))
    assert model.lm_head.weight is model.embed_tokens.weight
    save_pretrained(model, tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in set(f.keys())  # stored once, as the embedding
    loaded = load_pretrained(tmp_path, dtype=torch.float32)
    assert loaded.config.tie_word_embeddings
    assert loaded.lm_head.weight is loaded.embed_tokens.weight
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)


def test_sharded_checkpoint_with_index(tmp_path: Path) -> None:
    model = _trained_bias_model()
    save_pretrained(model, tmp_path, max_shard_bytes=50_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    loaded = load_pretrained(tmp_path, dtype=torch.bfloat16)
    assert loaded.embed_tokens.weight.dtype == torch.bfloat16
    assert loaded.moe_layers[0].gate.e_score_correction_bias.dtype == torch.float32
    assert torch.equal(loaded.norm.weight.float(), model.norm.weight.bfloat16().float())


def test_block_fp8_weights_are_dequantized(tmp_path: Path) -> None:
    model = _trained_bias_model()
    save_pretrained(model, tmp_path)
    tensors = to_hf_state_dict(model)
    key = "model.layers.0.self_attn.q_b_proj.weight"
    weight = tensors[key]
    scale = torch.full((1, 1), 0.01)
    tensors[key] = (weight / 0.01).to(torch.float8_e4m3fn)
    tensors[key + "_scale_inv"] = scale
    (tmp_path / "model.safetensors").unlink()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    loaded = load_pretrained(tmp_path)
    restored = loaded.layers[0].self_attn.q_b_proj.weight
    expected = tensors[key].float() * 0.01
    torch.testing.assert_close(restored, expected)
    assert (restored - weight).abs().max() < 0.1 * weight.abs().max()


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    save_pretrained(_trained_bias_model(), tmp_path)
    tensors = to_hf_state_dict(_trained_bias_model())
    del tensors["model.norm.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"norm\.weight"):
        load_pretrained(tmp_path)


def test_config_that_does_not_fit_the_weights(tmp_path: Path) -> None:
    save_pretrained(_trained_bias_model(), tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["kv_lora_rank"] = 32
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(WeightsError, match="checkpoint shape"):
        load_pretrained(tmp_path)
    data["kv_lora_rank"] = 16
    data["n_routed_experts"] = 4
    data["n_group"] = 2
    data["topk_group"] = 1
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(WeightsError, match="found 8 experts"):
        load_pretrained(tmp_path)


def test_corrupt_or_absent_files(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match=r"config\.json"):
        load_pretrained(tmp_path)
    save_pretrained(_trained_bias_model(), tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match=r"no \*\.safetensors"):
        load_pretrained(tmp_path)
