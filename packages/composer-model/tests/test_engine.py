"""Inference engine: batching, cache correctness, on-policy logprobs, in-flight weight updates."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import MHA, micro_config

from composer_model import ComposerModel, InferenceEngine, SamplingParams
from composer_model.engine import sampling_logprobs


def _model(dtype: torch.dtype = torch.float64, **overrides: object) -> ComposerModel:
    model = ComposerModel(micro_config(**overrides)).to(dtype).eval()
    with torch.no_grad():
        for layer in model.moe_layers:
            layer.gate.weight.normal_(0, 0.3)
        model.lm_head.weight.normal_(0, 0.3)  # peaked distributions: no greedy near-ties
    return model


PROMPTS = [[5, 9, 17, 3], [44, 2], [7, 7, 7, 7, 7, 7, 7, 7, 7], [100], [12, 13, 14]]


def test_batched_equals_one_at_a_time() -> None:
    model = _model()
    params = [
        SamplingParams(temperature=0.9, top_p=0.9, top_k=50, max_new_tokens=6 + i, seed=i)
        for i in range(5)
    ]
    batched = InferenceEngine(model, max_batch_size=3).generate(
        PROMPTS, params
    )  # forces joins and leaves
    for prompt, sp, got in zip(PROMPTS, params, batched, strict=True):
        alone = InferenceEngine(model, max_batch_size=1).generate([prompt], sp)[0]
        assert got.token_ids == alone.token_ids
        assert got.logprobs == pytest.approx(alone.logprobs, abs=1e-9)


@pytest.mark.parametrize("overrides", [{}, MHA], ids=["mla", "mha"])
def test_cached_decode_equals_full_recompute(overrides: dict[str, object]) -> None:
    model = _model(**overrides)
    params = SamplingParams(temperature=0.0, max_new_tokens=12, stop_token_ids=[])
    result = InferenceEngine(model).generate([PROMPTS[0]], params)[0]
    tokens = list(PROMPTS[0])
    for token in result.token_ids:  # greedy, one full forward per token, no cache at all
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0, -1]
        assert int(logits.argmax()) == token
        tokens.append(token)


def test_engine_logprobs_equal_training_forward_logprobs() -> None:
    model = _model(torch.float32)
    params = SamplingParams(
        temperature=1.0, max_new_tokens=10, seed=3, stop_token_ids=[], return_routing=True
    )
    engine = InferenceEngine(model, max_batch_size=4)
    results = engine.generate(PROMPTS[:3], params)
    for result in results:
        full = torch.tensor([result.prompt_ids + result.token_ids])
        with torch.no_grad():
            out = model(full, return_routing=True)
        logprobs = torch.log_softmax(out.logits[0].float(), -1)
        start = len(result.prompt_ids)
        expected = [float(logprobs[start - 1 + i, t]) for i, t in enumerate(result.token_ids)]
        assert result.logprobs == pytest.approx(expected, abs=2e-5)
        # The routing the engine reports is what the training forward chooses for every token.
        assert result.routing is not None and out.routing is not None
        assert result.routing.shape == (full.shape[1], 2, 2)
        for layer, indices in enumerate(out.routing):
            got = result.routing[:, layer].long().sort(-1).values
            assert torch.equal(got, indices.sort(-1).values)
        # The RL trainer's path: replay the engine's routing tensor as is.
        with torch.no_grad():
            replayed = model(full, replay_indices=result.routing)
        torch.testing.assert_close(replayed.logits, out.logits, atol=1e-6, rtol=0)


def test_sampling_distribution_is_what_the_logprob_describes() -> None:
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
    lp = sampling_logprobs(logits, SamplingParams(temperature=0.5, top_k=3))
    assert torch.isinf(lp[3:]).all() and lp[:3].exp().sum() == pytest.approx(1.0)
    lp = sampling_logprobs(logits, SamplingParams(top_p=0.7))
    kept = (~torch.isinf(lp)).sum()
    assert kept == 2  # softmax mass of the top token is ~0.6 < 0.7, two reach it
    generator = torch.Generator().manual_seed(0)
    from composer_model.engine.sampling import sample

    draws = [
        sample(logits, SamplingParams(temperature=1.0, top_k=2), generator)[0] for _ in range(400)
    ]
    assert set(draws) == {0, 1}
    assert abs(draws.count(0) / 400 - float(torch.softmax(logits[:2], 0)[0])) < 0.08


def test_weight_update_mid_sequence_changes_versions_at_the_right_token() -> None:
    model = _model()
    engine = InferenceEngine(model, max_batch_size=4, version=7)
    params = SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=[])
    first = engine.add_request(PROMPTS[0], params)
    for _ in range(3):
        assert engine.step() == []
    slots_before = engine.cache.lengths.clone()
    new_weights = {
        k: v + 0.01 * torch.randn_like(v)
        for k, v in model.state_dict().items()
        if v.is_floating_point()
    }
    engine.update_weights(new_weights, version=8)
    assert torch.equal(engine.cache.lengths, slots_before)  # caches kept
    second = engine.add_request(PROMPTS[1], params)
    done = {}
    while engine.has_unfinished():
        done.update({r.request_id: r for r in engine.step()})
    assert done[first].versions == [7, 7, 7, 8, 8, 8, 8, 8]
    assert done[second].versions == [8] * 8
    torch.testing.assert_close(model.state_dict()["norm.weight"], new_weights["norm.weight"])


def test_stop_tokens_stop_strings_and_limits() -> None:
    from composer_model import train_tokenizer

    tokenizer = train_tokenizer(["abc def ghi " * 50], vocab_size=300)
    model = ComposerModel(micro_config(vocab_size=tokenizer.vocab_size)).double()
    engine = InferenceEngine(model, tokenizer)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=20, stop_token_ids=[])
    free = engine.generate(["abc"], greedy)[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 20
    stop_token = free.token_ids[4]
    stopped = engine.generate(["abc"], greedy.model_copy(update={"stop_token_ids": [stop_token]}))[
        0
    ]
    assert stopped.finish_reason == "stop_token" and stopped.token_ids[-1] == stop_token
    assert stop_token not in stopped.token_ids[:-1]
    # Any printable ASCII character works as a stop string (no partial UTF-8 can fake it).
    match = re.search(r"[!-~]", free.text)
    assert match is not None, free.text
    piece = match.group()
    cut = engine.generate(["abc"], greedy.model_copy(update={"stop": [piece]}))[0]
    assert cut.finish_reason == "stop_string" and piece not in cut.text
    assert free.text.startswith(cut.text) and len(cut.token_ids) < 20


def test_bad_requests_are_refused_with_a_reason() -> None:
    engine = InferenceEngine(_model(), max_seq_len=16)
    with pytest.raises(ValueError, match="tokenizer"):
        engine.add_request("text without a tokenizer")
    with pytest.raises(ValueError, match="empty"):
        engine.add_request([])
    with pytest.raises(ValueError, match="at most 15"):
        engine.add_request(list(range(20)))
    with pytest.raises(ValueError, match=r"\[0, 128\)"):
        engine.add_request([500])
    with pytest.raises(KeyError, match="unknown tensors"):
        engine.update_weights({"nope": torch.zeros(1)}, version=1)
    result = engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=100, stop_token_ids=[]))[0]
    assert result.finish_reason == "length" and len(result.prompt_ids) + len(result.token_ids) == 16


def test_a_bad_weight_update_changes_nothing() -> None:
    model = _model()
    engine = InferenceEngine(model, version=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    update = {
        "norm.weight": torch.zeros(48, dtype=torch.float64),
        "lm_head.weight": torch.zeros(5, 5),
    }
    with pytest.raises(ValueError, match="wrong shape"):
        engine.update_weights(update, version=4)
    assert engine.version == 3
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_abort_frees_the_slot_for_waiting_requests() -> None:
    engine = InferenceEngine(_model(), max_batch_size=1)
    params = SamplingParams(temperature=0.0, max_new_tokens=50, stop_token_ids=[])
    long_one = engine.add_request(PROMPTS[0], params)
    short = engine.add_request(PROMPTS[1], params.model_copy(update={"max_new_tokens": 2}))
    engine.step()
    assert engine.num_running == 1
    assert engine.abort(long_one) and not engine.abort("nope")
    finished = []
    while engine.has_unfinished():
        finished += engine.step()
    assert [r.request_id for r in finished] == [short]
    assert len(finished[0].token_ids) == 2
