"""Multi-turn sessions: a turn continues from the previous turn's cache, exactly as a fresh prefill."""

from __future__ import annotations

import pytest
import torch
from conftest import micro_config
from test_mtp import _trained_on_a_cycle

from composer_model import ComposerModel, GenerationResult, InferenceEngine, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=7, stop_token_ids=[], return_routing=True)
TOOL_RESULTS = [[11, 12, 13, 14, 15], [60, 61], [90, 91, 92, 93]]


def _model(dtype: torch.dtype = torch.float32, **overrides: object) -> ComposerModel:
    model = ComposerModel(micro_config(**overrides)).to(dtype).eval()
    with torch.no_grad():
        for layer in model.moe_layers:
            layer.gate.weight.normal_(0, 0.3)
        model.lm_head.weight.normal_(0, 0.3)  # peaked distributions: no greedy near-ties
    return model


def _episode(
    engine: InferenceEngine, prompt: list[int], params: SamplingParams, session: str | None
) -> list[GenerationResult]:
    """Three turns: each prompt is the previous prompt + output + a 'tool result'."""
    results = []
    ids = list(prompt)
    for tool in TOOL_RESULTS:
        request = engine.add_request(ids, params, session=session)
        done: dict[str, GenerationResult] = {}
        while engine.has_unfinished():
            done.update({r.request_id: r for r in engine.step()})
        result = done[request]
        results.append(result)
        ids = ids + result.token_ids + tool
    return results


def _assert_exact(model: ComposerModel, result: GenerationResult) -> None:
    """Logprobs and expert indices equal the trainer's forward on the same tokens (fp32)."""
    full = torch.tensor([result.prompt_ids + result.token_ids])
    with torch.no_grad():
        out = model(full, return_routing=True)
    logprobs = torch.log_softmax(out.logits[0].float(), -1)
    start = len(result.prompt_ids)
    expected = [float(logprobs[start - 1 + i, t]) for i, t in enumerate(result.token_ids)]
    assert result.logprobs == pytest.approx(expected, abs=2e-5)
    assert result.routing is not None and out.routing is not None
    assert result.routing.shape[0] == full.shape[1]
    for layer, indices in enumerate(out.routing):
        assert torch.equal(result.routing[:, layer].long().sort(-1).values, indices.sort(-1).values)


def test_continued_turns_equal_fresh_prefills() -> None:
    model = _model()
    fresh = _episode(InferenceEngine(model, max_batch_size=2), [5, 9, 17, 3], GREEDY, None)
    engine = InferenceEngine(model, max_batch_size=2, version=4)
    continued = _episode(engine, [5, 9, 17, 3], GREEDY, "episode-0")
    # Every turn after the first reused all of the previous context.
    _, second, third = continued
    assert engine.stats.reused_tokens == (len(second.prompt_ids) - len(TOOL_RESULTS[0])) + (
        len(third.prompt_ids) - len(TOOL_RESULTS[1])
    )
    assert engine.stats.reused_tokens > 0 and engine.num_parked == 1
    for a, b in zip(fresh, continued, strict=True):
        assert a.prompt_ids == b.prompt_ids and a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=2e-5)
        assert b.versions == [4] * len(b.token_ids)
        assert a.routing is not None and b.routing is not None
        assert torch.equal(a.routing, b.routing)
        _assert_exact(model, b)
    assert engine.end_session("episode-0") and not engine.end_session("episode-0")
    assert engine.num_parked == 0 and len(engine.cache._free) == 2


def test_sampled_turns_equal_fresh_prefills_and_without_routing() -> None:
    model = _model(torch.float64)
    params = SamplingParams(temperature=0.9, top_k=40, max_new_tokens=6, stop_token_ids=[], seed=7)
    fresh = _episode(InferenceEngine(model), [44, 2], params, None)
    engine = InferenceEngine(model)
    continued = _episode(engine, [44, 2], params, "s")
    assert engine.stats.reused_tokens > 0
    for a, b in zip(fresh, continued, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)  # sampling runs in fp32
        assert b.routing is None


def test_a_changed_prefix_reuses_only_the_common_part() -> None:
    model = _model(torch.float64)
    engine = InferenceEngine(model)
    first = engine.generate([[5, 9, 17, 3, 8, 8]], GREEDY)[0]  # no session: nothing parked
    assert engine.num_parked == 0
    rid = engine.add_request([5, 9, 17, 3, 8, 8], GREEDY, session="s")
    while engine.has_unfinished():
        engine.step()
    assert engine.stats.reused_tokens == 0
    edited = [5, 9, 100, 3, 8, 8, *first.token_ids, 1, 2]  # third token changed
    rid = engine.add_request(edited, GREEDY, session="s")
    done = {}
    while engine.has_unfinished():
        done.update({r.request_id: r for r in engine.step()})
    assert engine.stats.reused_tokens == 2
    expected = InferenceEngine(model).generate([edited], GREEDY)[0]
    assert done[rid].token_ids == expected.token_ids
    assert done[rid].logprobs == pytest.approx(expected.logprobs, abs=1e-6)
    assert done[rid].routing is not None and expected.routing is not None
    assert torch.equal(done[rid].routing, expected.routing)


def test_weight_update_drops_parked_caches() -> None:
    model = _model(torch.float64)
    engine = InferenceEngine(model, version=1)
    result = engine.generate([[5, 9, 17]], GREEDY)[0]
    rid = engine.add_request([5, 9, 17], GREEDY, session="s")
    while engine.has_unfinished():
        engine.step()
    assert engine.num_parked == 1
    new_weights = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.update_weights(new_weights, version=2)
    assert engine.num_parked == 0
    prompt = [5, 9, 17, *result.token_ids, 3]
    rid = engine.add_request(prompt, GREEDY, session="s")
    done = {}
    while engine.has_unfinished():
        done.update({r.request_id: r for r in engine.step()})
    assert engine.stats.reused_tokens == 0
    assert done[rid].versions == [2] * 7
    _assert_exact(model, done[rid])


def test_parked_slots_are_lent_when_the_engine_is_full() -> None:
    model = _model(torch.float64)
    engine = InferenceEngine(model, max_batch_size=1)
    first = engine.add_request([5, 9, 17], GREEDY, session="a")
    done = {}
    while engine.has_unfinished():
        done.update({r.request_id: r for r in engine.step()})
    assert engine.num_parked == 1
    other = engine.generate([[44, 2]], GREEDY)[0]  # takes the parked slot
    assert engine.num_parked == 0 and len(other.token_ids) == 7
    prompt = [5, 9, 17, *done[first].token_ids, 4]
    rid = engine.add_request(prompt, GREEDY, session="a")
    while engine.has_unfinished():
        done.update({r.request_id: r for r in engine.step()})
    assert engine.stats.reused_tokens == 0
    assert done[rid].token_ids == InferenceEngine(model).generate([prompt], GREEDY)[0].token_ids


def test_one_request_in_flight_per_session() -> None:
    engine = InferenceEngine(_model())
    engine.add_request([1, 2], GREEDY, session="s")
    with pytest.raises(ValueError, match="already has a request in flight"):
        engine.add_request([1, 2, 3], GREEDY, session="s")


@pytest.mark.slow
def test_speculative_sessions_equal_plain_greedy() -> None:
    model, prompts = _trained_on_a_cycle()  # MTP drafts mostly right
    plain = _episode(InferenceEngine(model, max_batch_size=2), prompts[0], GREEDY, None)
    refill = InferenceEngine(model, max_batch_size=2, speculative=True)
    _episode(refill, prompts[0], GREEDY, None)
    engine = InferenceEngine(model, max_batch_size=2, speculative=True)
    fast = _episode(engine, prompts[0], GREEDY, "s")
    assert engine.stats.reused_tokens > 0 and engine.stats.drafted > 0
    # The resumed MTP cache drafts exactly what a fresh prefill's would.
    assert engine.stats.accepted > engine.stats.drafted // 2
    assert (engine.stats.drafted, engine.stats.accepted) == (
        refill.stats.drafted,
        refill.stats.accepted,
    )
    for a, b in zip(plain, fast, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)  # sampling runs in fp32
        assert a.routing is not None and b.routing is not None
        assert torch.equal(a.routing, b.routing)
    # Without routing the last sampled token is not cached: the MTP state resumes mid-way.
    no_routing = GREEDY.model_copy(update={"return_routing": False})
    plain = _episode(InferenceEngine(model), prompts[0], no_routing, None)
    refill = InferenceEngine(model, speculative=True)
    _episode(refill, prompts[0], no_routing, None)
    engine = InferenceEngine(model, speculative=True)
    fast = _episode(engine, prompts[0], no_routing, "s")
    assert engine.stats.reused_tokens > 0
    assert (engine.stats.drafted, engine.stats.accepted) == (
        refill.stats.drafted,
        refill.stats.accepted,
    )
    assert engine.stats.accepted > engine.stats.drafted // 2
    assert [r.token_ids for r in plain] == [r.token_ids for r in fast]
