"""`attention="mha"`: parity with transformers' Llama attention, the engine's logprobs against
the training forward (test_engine.py checks greedy decoding against it too), document
isolation, its init, and a config.json transformers will not misread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import MHA, micro_config

from composer_model import (
    ComposerModel,
    InferenceEngine,
    ModelConfig,
    SamplingParams,
    load_pretrained,
    save_pretrained,
)
from composer_model.layers.rope import RotaryEmbedding
from composer_model.layers.rotary_attention import RotaryAttention


def mha_config(**overrides: object) -> ModelConfig:
    return micro_config(**(MHA | overrides))


def _model(dtype: torch.dtype = torch.float64) -> ComposerModel:
    model = ComposerModel(mha_config()).to(dtype).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.3)  # peaked distributions: no greedy near-ties
    return model


def test_layer_matches_transformers_llama_attention() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    config = mha_config(qk_rope_head_dim=12, rope_scaling=None, attention_bias=True)
    ours = RotaryAttention(config, 0).double()
    with torch.no_grad():
        for param in ours.parameters():
            param.normal_(0.0, 0.3)
    hf_config = transformers.LlamaConfig(
        hidden_size=48,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=12,
        attention_bias=True,
        rope_theta=config.rope_theta,
        max_position_embeddings=64,
    )
    hf_config._attn_implementation = "eager"
    theirs = LlamaAttention(hf_config, layer_idx=0).double().eval()
    # Ours rotates interleaved pairs (2i, 2i+1), Llama rotates (i, i + d/2): the same attention
    # once each head's query and key rows are permuted that way.
    head = torch.cat([torch.arange(0, 12, 2), torch.arange(1, 12, 2)])
    rows = torch.cat([h * 12 + head for h in range(4)])
    with torch.no_grad():
        for name in ("q_proj", "k_proj"):
            getattr(theirs, name).weight.copy_(getattr(ours, name).weight[rows])
            getattr(theirs, name).bias.copy_(getattr(ours, name).bias[rows])
        for name in ("v_proj", "o_proj"):
            getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
            getattr(theirs, name).bias.copy_(getattr(ours, name).bias)
    x = torch.randn(1, 10, 48, dtype=torch.float64)
    positions = torch.arange(10)
    cos, sin = RotaryEmbedding(config)(positions)
    got = ours(x[0], cos.double(), sin.double(), torch.tensor([0, 10], dtype=torch.int32))
    hf_cos, hf_sin = LlamaRotaryEmbedding(hf_config)(x, positions[None])
    causal = torch.full((10, 10), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    want, _ = theirs(x, (hf_cos, hf_sin), attention_mask=causal)
    # Both compute cos/sin in float32, each its own way: 1e-6 (outputs are of order 1).
    torch.testing.assert_close(got, want[0], atol=5e-6, rtol=0)


def test_engine_logprobs_equal_training_forward_batched_and_speculative() -> None:
    model = _model(torch.float32)
    prompts = [[5, 9, 17, 3], [44, 2], [7, 7, 7, 7, 7, 7, 7, 7, 7]]
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=3, stop_token_ids=[])
    for speculative in (False, True):
        engine = InferenceEngine(model, max_batch_size=2, speculative=speculative)
        for result in engine.generate(prompts, params):
            with torch.no_grad():
                full = model(torch.tensor([result.prompt_ids + result.token_ids])).logits[0]
            logprobs = torch.log_softmax(full.float(), -1)
            start = len(result.prompt_ids)
            want = [float(logprobs[start - 1 + i, t]) for i, t in enumerate(result.token_ids)]
            assert result.logprobs == pytest.approx(want, abs=2e-5)


def test_packed_documents_do_not_see_each_other() -> None:
    model = ComposerModel(mha_config()).eval()
    a, b = torch.randint(0, 128, (1, 9)), torch.randint(0, 128, (1, 14))
    with torch.no_grad():
        out = model(torch.cat([a, b], dim=1), cu_seqlens=torch.tensor([0, 9, 23]))
        torch.testing.assert_close(out.logits[0, :9], model(a).logits[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(out.logits[0, 9:], model(b).logits[0], atol=1e-5, rtol=0)


def test_init_gives_the_attention_its_own_std_and_zero_biases() -> None:
    config = mha_config(hidden_size=256, attention_bias=True, attention_initializer_range=0.05)
    model = ComposerModel(config)
    attn = model.decoder_layers[0].self_attn
    assert isinstance(attn, RotaryAttention)
    assert attn.q_proj.weight.std().item() == pytest.approx(0.05, rel=0.05)
    assert attn.q_proj.bias is not None and not attn.q_proj.bias.any()
    assert model.decoder_layers[0].mlp.gate_proj.weight.std().item() == pytest.approx(
        0.02, rel=0.05
    )
    assert model.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_checkpoint_round_trips_and_transformers_refuses_it(tmp_path: Path) -> None:
    model = _model(torch.float32)
    save_pretrained(model, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "composer_mha"
    assert written["composer"]["attention"] == "mha"
    reloaded = load_pretrained(tmp_path)
    assert reloaded.config == model.config
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits)
    transformers = pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="composer_mha"):
        transformers.AutoConfig.from_pretrained(tmp_path)
    # A composer_mha file whose Composer section lost the attention kind is refused, not read
    # as MLA with the wrong weights.
    del written["composer"]["attention"]
    with pytest.raises(ValueError, match="attention='mha'"):
        ModelConfig.from_hf_dict(written)
